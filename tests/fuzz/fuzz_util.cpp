#include "tests/fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace precon::fuzz {

namespace fs = std::filesystem;

namespace {

fs::path make_scratch() {
  std::string pattern = (fs::temp_directory_path() / "precon-fuzz-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) fail("cannot create a scratch directory under " + fs::temp_directory_path().string());
  return pattern;
}

}  // namespace

const fs::path& scratch_dir() {
  static const fs::path dir = make_scratch();
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch_dir(), ec);
    });
    return true;
  }();
  (void)cleanup;
  return dir;
}

fs::path write_scratch(const std::string& name, std::string_view bytes) {
  const fs::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("cannot write " + path.string());
  return path;
}

std::string_view as_text(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

std::vector<std::string> split_nul(std::string_view text, size_t parts) {
  std::vector<std::string> out;
  while (out.size() + 1 < parts) {
    const size_t nul = text.find('\0');
    if (nul == std::string_view::npos) break;
    out.emplace_back(text.substr(0, nul));
    text.remove_prefix(nul + 1);
  }
  out.emplace_back(text);
  out.resize(parts);
  return out;
}

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace precon::fuzz
