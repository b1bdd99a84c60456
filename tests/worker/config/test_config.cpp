// The trial config: key table, TOML parsing, errors with file/line/key, overrides, round trip, and
// choices parsed into enums (choice.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "worker/config/choice.h"
#include "worker/config/keys.h"
#include "worker/config/parse.h"

namespace precon::worker {
namespace {

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config_text(text, "recipe.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesEveryTableIntoTypedFields) {
  auto parsed = parse_config_text(R"(
[experiment]
name = "ns-sweep"
[model]
n_layer = 2
n_head = 2
d_model = 64
[train]
steps = 30
grad_clip = 0.5
[optimizer]
name = "muon"
lr = 0.02
[optimizer.muon]
ns_steps = 8
coefficients = "polar-express"
nesterov = false
[optimizer.shampoo]
epsilon = 1e-10
precondition_frequency = 25
[resources]
sbatch_args = ["--exclusive"]
)", "recipe.toml");
  const TrialConfig& c = parsed.config;
  EXPECT_EQ(c.experiment.name, "ns-sweep");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.train.steps, 30);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 0.5);
  EXPECT_EQ(c.optimizer.name, "muon");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.02);
  EXPECT_EQ(c.optimizer.muon.ns_steps, 8);
  EXPECT_EQ(c.optimizer.muon.coefficients, "polar-express");
  EXPECT_FALSE(c.optimizer.muon.nesterov);
  EXPECT_DOUBLE_EQ(c.optimizer.shampoo.epsilon, 1e-10);
  EXPECT_EQ(c.optimizer.shampoo.precondition_frequency, 25);
  EXPECT_EQ(c.resources.sbatch_args, std::vector<std::string>{"--exclusive"});
  EXPECT_EQ(parsed.origin.at("optimizer.muon.ns_steps"), "recipe.toml:15");
  // Untouched keys keep their documented defaults.
  EXPECT_EQ(c.optimizer.muon.scale, "shape");
  EXPECT_DOUBLE_EQ(c.optimizer.muon.momentum, 0.95);
}

TEST(Config, UnknownKeyNamesLineAndSuggests) {
  std::string e = error_of("[optimizer.muon]\nns_step = 5\n");
  EXPECT_NE(e.find("recipe.toml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.muon.ns_step"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean optimizer.muon.ns_steps"), std::string::npos) << e;
  e = error_of("[trian]\nsteps = 5\n");
  EXPECT_NE(e.find("did you mean train.steps"), std::string::npos) << e;
}

TEST(Config, WrongTypesAndRangesAreErrors) {
  std::string e = error_of("[model]\n\nn_layer = \"four\"\n");
  EXPECT_NE(e.find("recipe.toml:3: model.n_layer: expected integer, got a string"), std::string::npos) << e;
  e = error_of("[model]\nn_layer = 0\n");
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = error_of("[optimizer]\nname = \"sgd\"\n");
  EXPECT_NE(e.find("one of \"adamw\", \"muon\", \"shampoo\""), std::string::npos) << e;
  e = error_of("[optimizer.muon]\nnesterov = 1\n");
  EXPECT_NE(e.find("expected boolean"), std::string::npos) << e;
  e = error_of("[model\nn_layer = 2\n");
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
  e = error_of("[optimizer.muon]\ncoefficient_list = [[1, 2]]\n");
  EXPECT_NE(e.find("[a, b, c]"), std::string::npos) << e;
}

TEST(Config, IntegerBoundsAndValuesPrintAsIntegers) {
  // model.seq_len is between 1 and 2^20: %g printed "1.04858e+06".
  std::string e = error_of("[model]\nseq_len = 2000000\n");
  EXPECT_NE(e.find("model.seq_len: value 2000000 is out of range: expected between 1 and 1048576"), std::string::npos) << e;
  e = error_of("[train]\nseed = -1\n");
  EXPECT_NE(e.find("expected between 0 and 9200000000000000000"), std::string::npos) << e;
  EXPECT_EQ(e.find("e+"), std::string::npos) << e;
  // A value past 2^53 is shown as given, not rounded through a double.
  e = error_of("[train]\nsteps = 9007199254740993\n");
  EXPECT_NE(e.find("value 9007199254740993 is out of range: expected between 1 and 1000000000000"), std::string::npos) << e;
  // Bounds that are not integral keep their shortest text.
  EXPECT_EQ(number_shown(3e-5), "3e-05");
  EXPECT_EQ(number_shown(0.5), "0.5");
  EXPECT_EQ(number_shown(1 << 20), "1048576");
}

TEST(Config, IntegersPast64BitsNameTheKeyAndItsBounds) {
  // 2^63 in a file: toml++ refuses it while parsing, before any key is read.
  std::string e = error_of("[model]\nn_layer = 2\n\n[train]\nsteps = 9223372036854775808\n");
  EXPECT_NE(e.find("recipe.toml:5: train.steps: 9223372036854775808 is out of range for a 64-bit integer: "
                   "expected between 1 and 1000000000000"), std::string::npos) << e;
  e = error_of("[train]\nseed = -9223372036854775809   # too low\n");
  EXPECT_NE(e.find("recipe.toml:2: train.seed: -9223372036854775809 is out of range for a 64-bit integer"),
            std::string::npos) << e;
  // In --set, where it used to become a string ("expected integer, got a string").
  e = error_of("", {"train.steps=9223372036854775808"});
  EXPECT_NE(e.find("--set: train.steps: 9223372036854775808 is out of range for a 64-bit integer: expected between 1"),
            std::string::npos) << e;
  EXPECT_EQ(e.find("got a string"), std::string::npos) << e;
  // A swept value: the key is the quoted name in [sweep.parameters].
  try {
    parse_toml_text("[sweep.parameters]\n\"train.steps\" = [10, 99999999999999999999]\n", "r.toml");
    ADD_FAILURE() << "parsed";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("r.toml:2: train.steps: 99999999999999999999 is out of range for a 64-bit "
                                           "integer: expected between 1 and"), std::string::npos) << err.what();
  }
}

TEST(Config, CrossKeyChecks) {
  std::string e = error_of("[model]\nn_head = 3\nd_model = 64\n");
  EXPECT_NE(e.find("recipe.toml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("must divide d_model"), std::string::npos) << e;
  e = error_of("[train]\nprecision = \"bf16\"\n");
  EXPECT_NE(e.find("needs train.device"), std::string::npos) << e;
  e = error_of("[optimizer.muon]\ncoefficients = \"explicit\"\n");
  EXPECT_NE(e.find("coefficient_list"), std::string::npos) << e;
}

TEST(Config, OverridesUseTomlValuesAndBareWords) {
  auto parsed = parse_config_text("[optimizer]\nname = \"adamw\"\n", "r.toml",
                                  {"optimizer.name=muon", "optimizer.muon.ns_steps=10", "train.grad_clip = 0",
                                   "optimizer.muon.coefficient_list=[[2, -1.5, 0.5]]"});
  EXPECT_EQ(parsed.config.optimizer.name, "muon");
  EXPECT_EQ(parsed.config.optimizer.muon.ns_steps, 10);
  EXPECT_EQ(parsed.config.train.grad_clip, 0.0);
  EXPECT_EQ(parsed.config.optimizer.muon.coefficients, "explicit");
  ASSERT_EQ(parsed.config.optimizer.muon.coefficient_list.size(), 1u);
  EXPECT_EQ(parsed.config.optimizer.muon.coefficient_list[0][1], -1.5);
  EXPECT_EQ(parsed.origin.at("optimizer.name"), "--set");
  std::string e = error_of("", {"optimizer.muon.ns_steps=many"});
  EXPECT_NE(e.find("--set: optimizer.muon.ns_steps: expected integer"), std::string::npos) << e;
  e = error_of("", {"justakey"});
  EXPECT_NE(e.find("key=value"), std::string::npos) << e;
}

TEST(Config, SweepSettingsBelongToARecipe) {
  // precon-train takes one trial's config: a [sweep] table is a recipe's, and says so.
  std::string e = error_of("[sweep]\nmethod = \"grid\"\n");
  EXPECT_NE(e.find("recipe.toml:2: sweep.method: a [sweep] setting belongs to a recipe"), std::string::npos) << e;
  SweepSettings sweep;
  set_sweep_key(sweep, "sweep.max_attempts", toml::value<int64_t>(4), "r.toml", 3);
  EXPECT_EQ(sweep.max_attempts, 4);
  EXPECT_THROW(set_sweep_key(sweep, "train.steps", toml::value<int64_t>(4), "r.toml", 3), ConfigError);
}

TEST(Config, EveryProblemIsReportedInLineOrder) {
  // Three mistakes of three kinds (a typo, a range, a cross-key rule), one pass.
  ConfigError error("", 0, "", "");
  try {
    parse_config_text("[model]\nd_model = 100\nn_head = 3\n[optimizer.muon]\nns_steps = 0\n[train]\nstesp = 5\n",
                      "r.toml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    error = e;
  }
  const auto& issues = error.issues();
  ASSERT_EQ(issues.size(), 3u) << error.what();
  EXPECT_EQ(issues[0].line, 3);
  EXPECT_EQ(issues[0].key, "model.n_head");
  EXPECT_NE(issues[0].message.find("must divide d_model = 100"), std::string::npos);
  EXPECT_EQ(issues[1].line, 5);
  EXPECT_EQ(issues[1].key, "optimizer.muon.ns_steps");
  EXPECT_NE(issues[1].message.find("expected between 1 and 100"), std::string::npos);
  EXPECT_EQ(issues[2].line, 7);
  EXPECT_NE(issues[2].message.find("did you mean train.steps?"), std::string::npos);
  EXPECT_EQ(std::string(error.what()),
            issues[0].text() + "\n" + issues[1].text() + "\n" + issues[2].text());
}

TEST(Config, ReportsAreCappedAtTwenty) {
  std::string text = "[train]\n";
  for (int i = 0; i < 25; ++i) text += "unknown_" + std::to_string(i) + " = 1\n";
  try {
    parse_config_text(text, "r.toml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.issues().size(), kMaxConfigIssues);
    EXPECT_EQ(e.issues().front().line, 2);
    EXPECT_NE(std::string(e.what()).find("... and 5 more"), std::string::npos);
  }
}

TEST(Config, ValuesTheTrainerWouldRefuseFailAtParse) {
  // Each of these once passed the parser and failed only when the trial launched.
  EXPECT_NE(error_of("[optimizer.muon]\nns_steps = 0\n").find("ns_steps: value 0 is out of range"), std::string::npos);
  EXPECT_NE(error_of("[optimizer.shampoo]\nbeta1 = 1.0\n").find("must be below 1"), std::string::npos);
  EXPECT_NE(error_of("[experiment]\nname = \"a\\u001bb\"\n").find("no control characters"), std::string::npos);
  EXPECT_NE(error_of("[experiment]\nname = \"" + std::string(101, 'x') + "\"\n").find("1 to 100 characters"),
            std::string::npos);
  EXPECT_NE(error_of("[resources]\npartition = \"gpu;rm\"\n").find("resources.partition"), std::string::npos);
  EXPECT_NE(error_of("[resources]\nsbatch_args = [\"--nodes=4\"]\n").find("use resources.nodes instead"),
            std::string::npos);
  EXPECT_NE(error_of("[resources]\nsbatch_args = [\"--output=/tmp/x\"]\n").find("set by precon; remove it"),
            std::string::npos);
  EXPECT_EQ(error_of("[parallel]\ntensor = 2\n"), "");
  EXPECT_NE(error_of("[model]\nn_head = 4\n[parallel]\ntensor = 3\n").find("tensor = 3 must divide n_head = 4"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nbatch_size = 6\n[parallel]\ndata = 4\n").find("must be a multiple of parallel.data = 4"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nbatch_size = 8\nmicro_batch_size = 3\n[parallel]\ndata = 2\n")
                .find("must divide the rank's slice batch_size / parallel.data = 4"),
            std::string::npos);
  EXPECT_EQ(error_of("[train]\nbatch_size = 8\nmicro_batch_size = 2\n[parallel]\ndata = 2\n"), "");
  // A short run with the default warm-up is fine: it warms up throughout.
  EXPECT_EQ(error_of("[train]\nsteps = 2\n"), "");
  // ... also once resolved: the stored config spells the default warm-up out, and the controller
  // reads it back at launch.
  TrialConfig short_run;
  short_run.train.steps = 2;
  EXPECT_EQ(error_of(config_to_toml(short_run)), "");
  EXPECT_NE(error_of("[train]\nsteps = 2\n[optimizer]\nwarmup_steps = 50\n").find("longer than train.steps = 2"),
            std::string::npos);
}

TEST(Config, TomlRoundTripKeepsEveryValue) {
  auto parsed = parse_config_text("[optimizer]\nlr = 0.0123\n[optimizer.muon]\ncoefficient_list = [[3.4445, -4.775, 2.0315]]\n"
                                  "[resources]\nsetup = [\"module load cuda\", \"echo \\\"hi\\\"\"]\n",
                                  "r.toml");
  std::string text = config_to_toml(parsed.config);
  auto again = parse_config_text(text, "resolved.toml");
  EXPECT_EQ(config_to_toml(again.config), text);
  EXPECT_DOUBLE_EQ(again.config.optimizer.lr, 0.0123);
  EXPECT_EQ(again.config.resources.setup[1], "echo \"hi\"");
  EXPECT_EQ(again.config.optimizer.muon.coefficient_list[0][0], 3.4445);
}

// The text of a float as configs and checkpoints have always written it: the shortest %g that
// reads back the same, found by trying every precision (the slow way, as a reference).
std::string shortest_g_by_trial(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  for (int prec = 1; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) {
      s = buf;
      break;
    }
  }
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

TEST(Config, FloatsAreWrittenAsTheyAlwaysWere) {
  const KeySpec* lr = find_key("optimizer.lr");
  ASSERT_NE(lr, nullptr);
  std::mt19937_64 rng(7);
  std::vector<double> values = {0.0, 1.0, 100.0, 1e-4, 3e-3, 0.1, 1.0 / 3.0, 2.5e-7, 1e22, 123456789.0,
                                5e-324, 1.7976931348623157e308, 0.30000000000000004, 9007199254740993.0};
  std::uniform_real_distribution<double> exponent(-12, 12);
  for (int i = 0; i < 20000; ++i) values.push_back(std::pow(10.0, exponent(rng)));
  for (int i = 0; i < 2000; ++i) {  // arbitrary bit patterns, powers of two (uneven rounding gaps) among them
    uint64_t bits = rng() & 0x7fefffffffffffffull;
    double v;
    std::memcpy(&v, &bits, sizeof v);
    values.push_back(v);
    values.push_back(std::ldexp(1.0, static_cast<int>(rng() % 2000) - 1000));
  }
  TrialConfig c;
  for (double v : values) {
    c.optimizer.lr = v;
    ASSERT_EQ(value_text(c, *lr), shortest_g_by_trial(v)) << std::hexfloat << v;
  }
}

TEST(Config, DefaultConfigRoundTrips) {
  // Every default, including the empty coefficient list, reads back.
  std::string text = config_to_toml(TrialConfig{});
  EXPECT_EQ(config_to_toml(parse_config_text(text, "defaults.toml").config), text);
}

TEST(Config, KeyTableDocumentsEveryKey) {
  std::string table = format_key_table();
  for (const KeySpec* k : trial_keys()) {
    EXPECT_FALSE(k->description.empty()) << k->name;
    EXPECT_NE(table.find(k->name), std::string::npos) << k->name;
  }
  EXPECT_GE(trial_keys().size(), 70u);
  // The [sweep] rows are the recipe's: in `precon recipe keys`, not in `precon-train keys`.
  EXPECT_EQ(table.find("sweep.max_attempts"), std::string::npos);
  EXPECT_NE(format_key_table(true).find("sweep.max_attempts"), std::string::npos);
  EXPECT_EQ(find_key("optimizer.muon.ns_steps")->default_text(), "5");
  EXPECT_EQ(find_key("optimizer.muon.coefficients")->default_text(), "\"keller\"");
}

enum class TpMode { duplicated, distributed, blockwise };
constexpr Choice<TpMode> kTpModes[] = {
    {"duplicated", TpMode::duplicated}, {"distributed", TpMode::distributed}, {"blockwise", TpMode::blockwise}};

TEST(ConfigChoice, ParsesEachChoiceIntoItsEnumValue) {
  EXPECT_EQ(parse_choice<WorkerError>("optimizer.muon.tp_mode", "duplicated", kTpModes), TpMode::duplicated);
  EXPECT_EQ(parse_choice<WorkerError>("optimizer.muon.tp_mode", "distributed", kTpModes), TpMode::distributed);
  EXPECT_EQ(parse_choice<WorkerError>("optimizer.muon.tp_mode", "blockwise", kTpModes), TpMode::blockwise);
  EXPECT_EQ(choice_name(TpMode::distributed, kTpModes), "distributed");
}

TEST(ConfigChoice, AnUnknownValueNamesTheKeyAndTheKeyTablesChoices) {
  const std::string text = not_a_choice_text("optimizer.muon.tp_mode", "rowwise");
  EXPECT_EQ(text, "\"rowwise\" is not " + find_key("optimizer.muon.tp_mode")->expected_text());
  EXPECT_EQ(text, "\"rowwise\" is not one of \"duplicated\", \"distributed\", \"blockwise\"");
  // The parser says the same of the same value in a file.
  EXPECT_NE(error_of("[optimizer.muon]\ntp_mode = \"rowwise\"\n").find("optimizer.muon.tp_mode: " + text),
            std::string::npos);
  try {
    parse_choice<WorkerError>("optimizer.muon.tp_mode", "rowwise", kTpModes);
    ADD_FAILURE() << "no error";
  } catch (const WorkerError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer.muon.tp_mode: " + text);
  }
  try {
    parse_choice<ConfigError>("optimizer.muon.tp_mode", "rowwise", kTpModes);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "optimizer.muon.tp_mode");
    EXPECT_EQ(e.issues().front().message, text);
  }
}

TEST(ConfigChoice, ATableMustListExactlyTheKeysChoices) {
  constexpr Choice<TpMode> missing[] = {{"duplicated", TpMode::duplicated}, {"distributed", TpMode::distributed}};
  EXPECT_THROW(parse_choice<WorkerError>("optimizer.muon.tp_mode", "duplicated", missing), std::logic_error);
  constexpr Choice<TpMode> invented[] = {{"duplicated", TpMode::duplicated},
                                         {"distributed", TpMode::distributed},
                                         {"blockwise", TpMode::blockwise},
                                         {"rowwise", TpMode::blockwise}};
  EXPECT_THROW(parse_choice<WorkerError>("optimizer.muon.tp_mode", "duplicated", invented), std::logic_error);
  // Any order; a key that is not in the table, or has no choices, is a bug too.
  constexpr Choice<TpMode> reordered[] = {
      {"blockwise", TpMode::blockwise}, {"duplicated", TpMode::duplicated}, {"distributed", TpMode::distributed}};
  EXPECT_EQ(parse_choice<WorkerError>("optimizer.muon.tp_mode", "blockwise", reordered), TpMode::blockwise);
  EXPECT_THROW(parse_choice<WorkerError>("optimizer.muon.tp_mod", "duplicated", kTpModes), std::logic_error);
  EXPECT_THROW(parse_choice<WorkerError>("optimizer.muon.ns_steps", "duplicated", kTpModes), std::logic_error);
}

}  // namespace
}  // namespace precon::worker
