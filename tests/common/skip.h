// Skipping a test for want of a tool: reported as skipped on a developer's machine, a failure
// under CI=true, where deploy/install-deps.sh has installed every tool and a skip would hide
// that a check did not run.
#pragma once

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace precon::test {

inline bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace precon::test

// In a test body or SetUp: skips (or, under CI=true, fails) the current test and returns.
#define PRECON_SKIP_UNLESS_CI(why)                                                      \
  do {                                                                                  \
    if (::precon::test::under_ci()) GTEST_FAIL() << (why) << " (CI=true: a missing tool fails)"; \
    GTEST_SKIP() << (why);                                                              \
  } while (0)
