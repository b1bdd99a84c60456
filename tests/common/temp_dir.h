// A fresh directory under the system's temporary directory, removed with all it holds when the
// object goes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace precon::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "precon_test_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace precon::test
