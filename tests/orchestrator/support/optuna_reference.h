// A test suite whose expected values come from a script of tests/orchestrator/recipe/ run once
// against Debian's python3-optuna (`SCRIPT --out FILE`, FILE holding JSON): ref_ is that JSON.
// Without optuna each test skips (and fails on CI).
//   inline constexpr char kScript[] = "tpe_reference.py";
//   class TpeOptuna : public OptunaReference<kScript> {};
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/skip.h"

namespace precon::orch {

template <const char* Script>
class OptunaReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string py = PRECON_PYTHON;
    if (std::system((py + " -c 'import optuna' >/dev/null 2>&1").c_str()) != 0) {
      skip_ = "optuna cannot be imported by " + py + " (install python3-optuna: deploy/install-deps.sh)";
      return;
    }
    const std::string script(Script);
    const std::string out = ::testing::TempDir() + script + "-" + std::to_string(::getpid()) + ".json";
    const std::string cmd = py + " " + PRECON_SOURCE_DIR + "/tests/orchestrator/recipe/" + script + " --out " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    ref_ = nlohmann::json::parse(f);
    std::remove(out.c_str());
  }
  void SetUp() override {
    if (!skip_.empty()) PRECON_SKIP_UNLESS_CI(skip_);
    // (ctest would count a failed SetUpTestSuite as skipped: each test fails on its own.)
    if (ref_.is_null()) FAIL() << "the Optuna reference file was not produced (see SetUpTestSuite's error)";
  }
  static inline nlohmann::json ref_;
  static inline std::string skip_;
};

}  // namespace precon::orch
