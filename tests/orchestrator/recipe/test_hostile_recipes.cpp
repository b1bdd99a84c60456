// Recipes built to hurt the controller or the trainer, through every entry point a user has:
// `precon recipe check`, `precon run`, `precon-train --config`, `--set`, and a submission over a
// real socket to a `precon serve` child, which must answer and stay up.
#include <gtest/gtest.h>

#include <string>

#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

class HostileRecipe : public CliFixture {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  static std::string dotted(int segments) {
    std::string key = "a";
    for (int i = 1; i < segments; ++i) key += ".a";
    return key;
  }
  static std::string admin_token(const Serve& s) {
    std::string token = read_file(s.db.string() + ".token");
    return token.substr(0, token.find('\n'));
  }
  test::CommandResult train(const std::string& args) const {
    fs::create_directories(dir_ / "train_run");
    return test::run_command(std::string(PRECON_TRAIN_BIN) + " --run-dir " + (dir_ / "train_run").string() + " " + args);
  }
};

// toml++ recursed once per segment of a dotted header: 40,000 of them (80 KB) overflowed the
// stack, so `recipe check` died with SIGSEGV and a submission killed `precon serve`.
TEST_F(HostileRecipe, ATableHeaderOrKeyWithTensOfThousandsOfDottedSegmentsIsRefusedEverywhere) {
  const std::string header = write("header.toml", recipe(2, "") + "[" + dotted(40000) + "]\n");
  const std::string key = write("key.toml", recipe(2, "") + "[experiment]\n" + dotted(40000) + " = 1\n");
  const int header_line = 24, key_line = 25;  // after the 23 lines of recipe()
  const std::string why = ": has more than 16 dotted segments: no recipe key has that many";

  for (const auto& [path, line] : {std::pair{header, header_line}, std::pair{key, key_line}}) {
    const std::string where = path + ":" + std::to_string(line) + ": a.a.a.a";
    test::CommandResult r = precon("recipe check " + path);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(where), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
    r = precon("run " + path + " --db " + (dir_ / "run.db").string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(where), std::string::npos) << r.output;
    r = train("--config " + path);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(where), std::string::npos) << r.output;
  }
  const std::string good = write("good.toml", recipe(2, ""));
  test::CommandResult r = train("--config " + good + " --set 'model={" + dotted(40000) + "=1}'");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--set: a.a.a"), std::string::npos) << r.output;
  r = precon("recipe check " + good + " --set 'train.steps={" + dotted(17) + "=1}'");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--set: " + dotted(17) + why), std::string::npos) << r.output;

  // Sixteen segments is the most and is an ordinary unknown key.
  r = precon("recipe check " + write("sixteen.toml", recipe(2, "") + dotted(16) + " = 1\n"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(dotted(16) + ": unknown key"), std::string::npos) << r.output;

  Serve s = serve();
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  ClientResponse answer = post(s.url, "/api/v1/experiments",
                               nlohmann::json{{"recipe", test::slurp(header)}, {"source", "h.toml"}}.dump(), admin_token(s));
  EXPECT_EQ(answer.status, 400) << answer.body;
  EXPECT_NE(answer.body.find("has more than 16 dotted segments"), std::string::npos) << answer.body;
  EXPECT_EQ(http_request(s.url, "GET", "/healthz").status, 200) << read_file(s.log);
  EXPECT_EQ(s.stop(), 0) << read_file(s.log);
}

// A --set value carried a whole TOML document (`5\n[model]\nn_layer=7`: the rest was dropped,
// exit 0) or a comment.
TEST_F(HostileRecipe, ASetValueIsExactlyOneTomlValue) {
  const std::string good = write("good.toml", recipe(2, ""));
  test::CommandResult r = precon("recipe check " + good + " --set \"$(printf 'train.steps=5\\n[model]\\nn_layer=7')\"");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--set: train.steps: a --set value is exactly one TOML value, nothing after it (it holds a "
                          "line break)"),
            std::string::npos) << r.output;
  r = precon("recipe check " + good + " --set 'optimizer.lr=1 # c'");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--set: optimizer.lr: a --set value is exactly one TOML value, nothing after it (it holds a "
                          "# comment)"),
            std::string::npos) << r.output;
  r = train("--config " + good + " --set 'optimizer.lr=1 # c'");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("optimizer.lr: a --set value is exactly one TOML value"), std::string::npos) << r.output;
  // A # inside a string, and an ordinary value, still read.
  r = precon("recipe check " + good + " --set 'experiment.name=\"run #2\"' --set optimizer.lr=0.002");
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(HostileRecipe, RepeatedSweepValuesAreRefusedWithTheKeyAndLine) {
  const std::string path = write("dup.toml", recipe(2, "[sweep.parameters]\n\"optimizer.lr\" = [1e-3, 1e-3, 0.001, 1.0e-3]\n"));
  test::CommandResult r = precon("recipe check " + path);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":25: optimizer.lr: value 2 repeats value 1 (0.001): each trial would run twice"),
            std::string::npos) << r.output;
  r = precon("recipe check " + write("dup2.toml", recipe(2, "[sweep.parameters]\n\"train.seed\" = [1, 2, 1]\n")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("train.seed: value 3 repeats value 1 (1)"), std::string::npos) << r.output;
  r = precon("recipe check " + write("distinct.toml", recipe(2, "[sweep.parameters]\n\"optimizer.lr\" = [1e-3, 2e-3]\n")));
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(HostileRecipe, ADeviceAsTrainingDataIsNamedAsNotARegularFile) {
  std::string text = recipe(2, "");
  const std::string train_bin = (dir_ / "train.bin").string();
  text.replace(text.find(train_bin), train_bin.size(), "/dev/zero");
  test::CommandResult r = precon("recipe check " + write("dev.toml", text));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("/dev/zero (data.train) is not a regular file (it is a character device)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("does not exist"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precon::orch::testing
