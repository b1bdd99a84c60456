// Inputs that the fuzz targets (tests/fuzz) found to break a parser, each kept as a test here and
// as an input in tests/fuzz/corpus/<target>/regression-*.
#include <gtest/gtest.h>

#include <string>

#include "orchestrator/recipe/recipe.h"
#include "worker/config/keys.h"
#include "worker/config/parse.h"

namespace precon::orch {
namespace {

// fuzz_recipe: every unknown key is compared with every known key for a "did you mean"; a key of
// a few thousand characters took seconds (edit distance over all ~150 keys), so a recipe or a
// --set of such keys held the controller's submit route for minutes. Keys that cannot be within
// the suggestion's limit are now skipped by length first. Before the fix this test ran for many
// minutes (it fails by ctest's timeout); now it takes milliseconds.
TEST(FuzzRegressions, LongUnknownKeysAreRefusedWithoutComparingEveryKey) {
  std::string text = "[train]\nsteps = 10\n";
  std::vector<std::string> overrides;
  for (int i = 0; i < 20; ++i) {
    const std::string key(100000, static_cast<char>('a' + i));
    text += key + " = 1\n";
    overrides.push_back("train." + key + "=2");
  }
  try {
    parse_recipe_text(text, "long.toml", overrides);
    FAIL() << "a recipe of unknown keys was accepted";
  } catch (const worker::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown key"), std::string::npos);
    EXPECT_EQ(what.find("did you mean"), std::string::npos);
  }
  // Suggestions for near misses are unchanged, on the whole name and on its last component.
  EXPECT_EQ(worker::closest_key("optimizer.muon.ns_step"), "optimizer.muon.ns_steps");
  EXPECT_EQ(worker::closest_key("ns_step"), "optimizer.muon.ns_steps");
  EXPECT_EQ(worker::closest_key("train.step"), "train.steps");
  EXPECT_EQ(worker::closest_key(std::string(5000, 'x')), "");
}

}  // namespace
}  // namespace precon::orch
