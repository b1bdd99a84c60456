// Sweep expansion: the union of sub-grids, grid order, random search (determinism, ranges,
// spread), the shipped recipes, and the data check.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/sched/early_stop.h"
#include "worker/data/shard.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;

std::string recipe_path(const std::string& name) { return std::string(PRECON_SOURCE_DIR) + "/recipes/" + name; }

std::vector<std::string> labels(const std::vector<TrialSpec>& trials) {
  std::vector<std::string> out;
  for (const TrialSpec& t : trials) out.push_back(t.label);
  return out;
}

TEST(Sweep, QuickstartIsAUnionOfSubGrids) {
  Recipe r = parse_recipe_file(recipe_path("quickstart.toml"));
  EXPECT_EQ(r.sweep.max_concurrent, 2);
  EXPECT_EQ(r.sweep.grids.size(), 3u);
  auto trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 5u);  // AdamW; Muon × 2 ns_steps; Shampoo × 2 frequencies
  EXPECT_EQ(labels(trials), (std::vector<std::string>{
                                "optimizer.name=adamw optimizer.lr=0.008",
                                "optimizer.name=muon optimizer.lr=0.02 optimizer.adamw.lr=0.003 optimizer.muon.ns_steps=3",
                                "optimizer.name=muon optimizer.lr=0.02 optimizer.adamw.lr=0.003 optimizer.muon.ns_steps=5",
                                "optimizer.name=shampoo optimizer.lr=0.003 optimizer.shampoo.precondition_frequency=1",
                                "optimizer.name=shampoo optimizer.lr=0.003 optimizer.shampoo.precondition_frequency=10",
                            }));
  for (size_t i = 0; i < trials.size(); ++i) {
    const worker::TrialConfig& c = trials[i].config;
    EXPECT_EQ(trials[i].index, static_cast<int64_t>(i));
    // The shared settings of the issue's quickstart.
    EXPECT_EQ(c.model.n_layer, 4);
    EXPECT_EQ(c.model.n_head, 4);
    EXPECT_EQ(c.model.d_model, 128);
    EXPECT_EQ(c.model.seq_len, 128);
    EXPECT_EQ(c.model.vocab_size, 256);
    EXPECT_EQ(c.train.batch_size, 16);
    EXPECT_EQ(c.train.steps, 300);
    EXPECT_EQ(c.train.eval_every, 50);
    EXPECT_EQ(c.train.eval_batches, 8);
    EXPECT_EQ(c.train.checkpoint_every, 150);
    EXPECT_EQ(c.train.threads, 1);
    EXPECT_EQ(c.optimizer.schedule, "constant");
    EXPECT_EQ(c.optimizer.warmup_steps, 50);
    EXPECT_EQ(c.data.train, (std::vector<worker::DataSource>{{"data/sotu/train.bin", 1.0}}));
    EXPECT_EQ(c.data.val, (std::vector<worker::DataSource>{{"data/sotu/val.bin", 1.0}}));
    EXPECT_EQ(c.objective.metric, "val_loss");
    EXPECT_EQ(c.objective.mode, "min");
    // What a trial stores reads back as the same config.
    auto again = worker::parse_config_text(trials[i].config_toml, "stored.toml");
    EXPECT_EQ(worker::config_to_toml(again.config), trials[i].config_toml);
  }
  const worker::TrialConfig defaults;
  EXPECT_EQ(trials[0].config.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(trials[0].config.optimizer.lr, 8e-3);
  EXPECT_EQ(trials[0].config.optimizer.adamw.lr, defaults.optimizer.adamw.lr);  // no Muon setting leaks in
  EXPECT_EQ(trials[0].params, (nlohmann::json{{"optimizer.name", "adamw"}, {"optimizer.lr", 8e-3}}));
  for (int i : {1, 2}) {
    EXPECT_EQ(trials[i].config.optimizer.name, "muon");
    EXPECT_DOUBLE_EQ(trials[i].config.optimizer.lr, 0.02);
    EXPECT_DOUBLE_EQ(trials[i].config.optimizer.adamw.lr, 3e-3);
    EXPECT_EQ(trials[i].config.optimizer.shampoo.precondition_frequency, defaults.optimizer.shampoo.precondition_frequency);
    EXPECT_FALSE(trials[i].params.contains("optimizer.shampoo.precondition_frequency"));
  }
  EXPECT_EQ(trials[1].config.optimizer.muon.ns_steps, 3);
  EXPECT_EQ(trials[2].config.optimizer.muon.ns_steps, 5);
  for (int i : {3, 4}) {
    EXPECT_EQ(trials[i].config.optimizer.name, "shampoo");
    EXPECT_DOUBLE_EQ(trials[i].config.optimizer.lr, 3e-3);
    EXPECT_EQ(trials[i].config.optimizer.muon.ns_steps, defaults.optimizer.muon.ns_steps);
    EXPECT_FALSE(trials[i].params.contains("optimizer.muon.ns_steps"));
  }
  EXPECT_EQ(trials[3].config.optimizer.shampoo.precondition_frequency, 1);
  EXPECT_EQ(trials[4].config.optimizer.shampoo.precondition_frequency, 10);
  EXPECT_NE(trials[4].config_toml.find("precondition_frequency = 10\n"), std::string::npos);
}

TEST(Sweep, ShippedBohbRecipeIsTpeWithFourHyperbandBrackets) {
  const Recipe r = parse_recipe_file(recipe_path("bohb-muon.toml"));
  EXPECT_EQ(sweep_method(r.sweep), SweepMethod::tpe);
  EXPECT_EQ(sweep_size(r), 24);
  EXPECT_EQ(r.sweep.tpe.n_startup_trials, 8);
  EarlyStopSettings s;
  s.method = r.sweep.early_stop.method;
  s.min_step = r.sweep.early_stop.min_step;
  s.reduction_factor = r.sweep.early_stop.reduction_factor;
  s.max_step = r.base.config.train.steps;
  const EarlyStopper hyperband(s);
  EXPECT_EQ(hyperband.brackets(), 4);  // as the recipe's comment says: rungs 30, 90, 270 before 810
  EXPECT_EQ(hyperband.rungs(r.base.config.train.steps), (std::vector<int64_t>{30, 90, 270, 810}));
}

TEST(Sweep, ShippedRecipesExpand) {
  struct Case {
    const char* file;
    size_t trials;
  };
  for (const Case& c : {Case{"quickstart.toml", 5}, Case{"muon-ns-sweep.toml", 8}, Case{"shampoo-refresh-sweep.toml", 5},
                        Case{"random-lr-asha.toml", 16}, Case{"megatron-blend.toml", 2}}) {
    SCOPED_TRACE(c.file);
    Recipe r = parse_recipe_file(recipe_path(c.file));
    EXPECT_EQ(expand_sweep(r).size(), c.trials);
    EXPECT_EQ(sweep_size(r), static_cast<int64_t>(c.trials));
  }
  auto ns = expand_sweep(parse_recipe_file(recipe_path("muon-ns-sweep.toml")));
  EXPECT_EQ(ns[0].label, "optimizer.muon.ns_steps=5 optimizer.muon.coefficients=keller");
  EXPECT_EQ(ns[1].label, "optimizer.muon.ns_steps=5 optimizer.muon.coefficients=polar-express");
  EXPECT_EQ(ns[7].label, "optimizer.muon.ns_steps=10 optimizer.muon.coefficients=polar-express");
  for (const TrialSpec& t : expand_sweep(parse_recipe_file(recipe_path("shampoo-refresh-sweep.toml"))))
    EXPECT_EQ(t.config.optimizer.shampoo.start_preconditioning_step, 0);  // = the frequency
  Recipe asha = parse_recipe_file(recipe_path("random-lr-asha.toml"));
  EXPECT_EQ(asha.sweep.early_stop.method, "asha");
  EXPECT_EQ(asha.sweep.early_stop.metric, "val_loss");
  EXPECT_EQ(asha.sweep.early_stop.mode, "min");
  for (const TrialSpec& t : expand_sweep(asha)) {
    EXPECT_GE(t.config.optimizer.lr, 2e-3);
    EXPECT_LE(t.config.optimizer.lr, 2e-1);
  }
}

// recipes/muonclip-deepseek.toml: a DeepSeek-V3-shaped model (MLA, the first layer dense, the sigmoid
// router with a shared expert), AdamW measuring its logits and Muon with a QK-clip that clips.
TEST(Sweep, TheMuonClipDeepseekRecipeIsAdamwAgainstMuonWithQkClip) {
  const std::vector<TrialSpec> trials = expand_sweep(parse_recipe_file(recipe_path("muonclip-deepseek.toml")));
  ASSERT_EQ(trials.size(), 2u);
  for (const TrialSpec& t : trials) {
    const worker::ModelConfig& m = t.config.model;
    EXPECT_TRUE(m.deepseek_v3()) << t.label;
    EXPECT_TRUE(m.moe.sigmoid()) << t.label;
    EXPECT_EQ(m.moe.shared_experts, 1) << t.label;
    EXPECT_EQ(m.moe.first_dense_layers, 1) << t.label;
    EXPECT_GT(m.mla.q_lora_rank, 0) << t.label;
    EXPECT_GT(t.config.optimizer.qk_clip_threshold, 0) << t.label;  // every trial reports its logits
  }
  EXPECT_EQ(trials[0].config.optimizer.name, "adamw");
  EXPECT_GE(trials[0].config.optimizer.qk_clip_threshold, 1e9);  // measures, never clips
  EXPECT_EQ(trials[1].config.optimizer.name, "muon");
  EXPECT_LT(trials[1].config.optimizer.qk_clip_threshold, 1e3);
}

TEST(Sweep, TheGpuClusterExampleIsAValidRecipe) {
  // deploy/slurm/gpu-cluster.toml: 2 nodes × 8 ranks, data parallel over 16, a day's pending limit.
  auto trials = expand_sweep(parse_recipe_file(std::string(PRECON_SOURCE_DIR) + "/deploy/slurm/gpu-cluster.toml"));
  ASSERT_EQ(trials.size(), 1u);
  const worker::TrialConfig& c = trials[0].config;
  EXPECT_EQ(c.resources.nodes * c.resources.ntasks_per_node, c.parallel.data * c.parallel.tensor);
  EXPECT_EQ(c.train.batch_size % c.parallel.data, 0);
  EXPECT_EQ(c.resources.pending_limit, "1-00:00:00");
}

TEST(Sweep, GridIsTheProductFirstKeySlowest) {
  Recipe r = parse_recipe_text(R"(
[sweep.parameters]
"train.seed" = [1, 2]
"optimizer.name" = ["adamw", "muon", "shampoo"]
"optimizer.lr" = [0.001, 0.01]
)",
                               "g.toml");
  auto trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 12u);
  EXPECT_EQ(trials[0].label, "train.seed=1 optimizer.name=adamw optimizer.lr=0.001");
  EXPECT_EQ(trials[1].label, "train.seed=1 optimizer.name=adamw optimizer.lr=0.01");
  EXPECT_EQ(trials[2].label, "train.seed=1 optimizer.name=muon optimizer.lr=0.001");
  EXPECT_EQ(trials[6].label, "train.seed=2 optimizer.name=adamw optimizer.lr=0.001");
  EXPECT_EQ(trials[11].label, "train.seed=2 optimizer.name=shampoo optimizer.lr=0.01");
  const std::vector<std::string> all = labels(trials);
  const std::set<std::string> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), 12u);
  // An integer listed for a real key is a real in the config and in params.
  Recipe ints = parse_recipe_text("[sweep.parameters]\n\"train.grad_clip\" = [0, 1]\n", "g.toml");
  auto t = expand_sweep(ints);
  EXPECT_TRUE(t[1].params["train.grad_clip"].is_number_float());
  EXPECT_EQ(t[1].config.train.grad_clip, 1.0);
}

TEST(Sweep, ParametersCrossEverySubGridAndDuplicatesAreKept) {
  Recipe r = parse_recipe_text(R"(
[sweep.parameters]
"train.seed" = [1, 2]
[[sweep.grid]]
"optimizer.name" = ["adamw"]
[[sweep.grid]]
"optimizer.name" = ["muon"]
"optimizer.muon.ns_steps" = [3, 5]
[[sweep.grid]]
"optimizer.name" = ["adamw"]
)",
                               "g.toml");
  EXPECT_EQ(sweep_size(r), 2 + 4 + 2);
  auto trials = expand_sweep(r);
  EXPECT_EQ(labels(trials), (std::vector<std::string>{
                                "train.seed=1 optimizer.name=adamw",
                                "train.seed=2 optimizer.name=adamw",
                                "train.seed=1 optimizer.name=muon optimizer.muon.ns_steps=3",
                                "train.seed=1 optimizer.name=muon optimizer.muon.ns_steps=5",
                                "train.seed=2 optimizer.name=muon optimizer.muon.ns_steps=3",
                                "train.seed=2 optimizer.name=muon optimizer.muon.ns_steps=5",
                                "train.seed=1 optimizer.name=adamw",
                                "train.seed=2 optimizer.name=adamw",
                            }));
}

const char* kRandom = R"(
[sweep]
method = "random"
samples = 2000
seed = 42
[sweep.parameters]
"optimizer.lr" = { log_uniform = [1e-5, 1e-1] }
"train.batch_size" = { int_uniform = [1, 6] }
"optimizer.muon.momentum" = { uniform = [0.8, 0.99] }
"optimizer.name" = ["adamw", "muon", "shampoo"]
"optimizer.muon.coefficients" = { choice = ["keller", "polar-express"] }
)";

TEST(Sweep, RandomSearchIsDeterministic) {
  auto a = expand_sweep(parse_recipe_text(kRandom, "r.toml"));
  auto b = expand_sweep(parse_recipe_text(kRandom, "r.toml"));
  ASSERT_EQ(a.size(), 2000u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].label, b[i].label);
    EXPECT_EQ(a[i].config_toml, b[i].config_toml);
  }
  auto c = expand_sweep(parse_recipe_text(kRandom, "r.toml", {"sweep.seed=43"}));
  EXPECT_NE(a[0].label, c[0].label);
  // The generator is ours (xoshiro256** from splitmix64), so these values hold on every platform.
  auto first = expand_sweep(parse_recipe_text(kRandom, "r.toml", {"sweep.samples=2"}));
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].label, a[0].label);
  EXPECT_EQ(first[1].label, a[1].label);
  EXPECT_EQ(a[0].label,
            "optimizer.lr=2.16497000762327e-05 train.batch_size=1 optimizer.muon.momentum=0.9292082480953465 "
            "optimizer.name=shampoo optimizer.muon.coefficients=keller");
}

TEST(Sweep, RandomDrawsStayInRangeAndSpread) {
  auto trials = expand_sweep(parse_recipe_text(kRandom, "r.toml"));
  std::vector<int> per_decade(4, 0);
  std::set<int64_t> batch_sizes;
  std::set<std::string> names, coefficients;
  double lo_momentum = 1, hi_momentum = 0;
  for (const TrialSpec& t : trials) {
    const double lr = t.config.optimizer.lr;
    ASSERT_GE(lr, 1e-5);
    ASSERT_LE(lr, 1e-1);
    per_decade[std::min(3, static_cast<int>(std::floor(std::log10(lr) + 5)))]++;
    ASSERT_GE(t.config.train.batch_size, 1);
    ASSERT_LE(t.config.train.batch_size, 6);
    EXPECT_TRUE(t.params["train.batch_size"].is_number_integer());
    batch_sizes.insert(t.config.train.batch_size);
    const double m = t.config.optimizer.muon.momentum;
    ASSERT_GE(m, 0.8);
    ASSERT_LE(m, 0.99);
    lo_momentum = std::min(lo_momentum, m);
    hi_momentum = std::max(hi_momentum, m);
    names.insert(t.config.optimizer.name);
    coefficients.insert(t.config.optimizer.muon.coefficients);
  }
  // Uniform in log space: each of the four decades gets about a quarter.
  for (int d = 0; d < 4; ++d) {
    EXPECT_GT(per_decade[d], 400) << "decade 1e" << d - 5;
    EXPECT_LT(per_decade[d], 600) << "decade 1e" << d - 5;
  }
  EXPECT_EQ(batch_sizes, (std::set<int64_t>{1, 2, 3, 4, 5, 6}));  // both ends included
  EXPECT_LT(lo_momentum, 0.81);
  EXPECT_GT(hi_momentum, 0.98);
  EXPECT_EQ(names.size(), 3u);
  EXPECT_EQ(coefficients.size(), 2u);
}

TEST(Sweep, HugeGridIsRefused) {
  std::string text = "[sweep.parameters]\n";
  for (const char* key : {"train.seed", "optimizer.lr", "optimizer.weight_decay", "optimizer.warmup_steps", "train.grad_clip"}) {
    text += "\"" + std::string(key) + "\" = [";
    for (int i = 0; i < 12; ++i) text += (i ? ", " : "") + std::to_string(i);
    text += "]\n";
  }
  Recipe r = parse_recipe_text(text, "big.toml");
  EXPECT_EQ(sweep_size(r), 248832);
  try {
    expand_sweep(r);
    FAIL() << "no error";
  } catch (const worker::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("248832 trials, more than 100000; use sweep.method = \"random\""),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.line(), 2);
  }
}

TEST(Sweep, CheckRecipeDataFindsMissingFiles) {
  const fs::path dir = fs::temp_directory_path() / ("precon_sweep_data_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<uint16_t> tokens(100, 7);
  worker::write_shard(dir / "train.bin", tokens);
  worker::write_shard(dir / "val.bin", tokens);
  const std::string d = dir.string();
  Recipe r = parse_recipe_text("[data]\ntrain = \"" + d + "/train.bin, " + d + "/more.bin," + d + "/more.bin\"\nval = \"" + d +
                                   "/val.bin\"\n[sweep.parameters]\n\"data.val\" = [\"" + d + "/val.bin\", \"" + d +
                                   "/val2.bin\"]\n\"train.init_from\" = [\"\", \"" + d + "/init.safetensors\"]\n",
                               "d.toml");
  auto missing = check_recipe_data(expand_sweep(r));
  ASSERT_EQ(missing.size(), 3u) << ::testing::PrintToString(missing);
  EXPECT_EQ(missing[0], d + "/more.bin (data.train) does not exist; used by all 4 trials");
  EXPECT_EQ(missing[1], d + "/init.safetensors (train.init_from) does not exist; used by trial 1 (data.val=" + d +
                            "/val.bin train.init_from=" + d + "/init.safetensors), trial 3 (data.val=" + d +
                            "/val2.bin train.init_from=" + d + "/init.safetensors)");
  EXPECT_EQ(missing[2].rfind(d + "/val2.bin (data.val) does not exist; used by trial 2", 0), 0u) << missing[2];
  worker::write_shard(dir / "more.bin", tokens);
  worker::write_shard(dir / "val2.bin", tokens);
  std::ofstream(dir / "init.safetensors") << "x";  // its contents are the trainer's to check
  EXPECT_TRUE(check_recipe_data(expand_sweep(r)).empty());
  fs::remove_all(dir);
  auto one = check_recipe_data(expand_sweep(parse_recipe_text("[data]\ntrain = \"/nonexistent/t.bin\"\nval = \"/nonexistent/v.bin\"\n", "one.toml")));
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[1], "/nonexistent/v.bin (data.val) does not exist");
}

TEST(Sweep, CheckRecipeDataRefusesTokenFilesTheTrialsCannotRead) {
  const fs::path dir = fs::temp_directory_path() / ("precon_sweep_shards_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string d = dir.string();
  worker::write_shard(dir / "ok.bin", std::vector<uint16_t>(100, 7));
  worker::write_shard(dir / "short.bin", std::vector<uint16_t>(20, 7));
  std::vector<uint16_t> wide(5000, 7);
  wide[4000] = 300;
  worker::write_shard(dir / "wide.bin", wide);
  {
    std::ofstream text(dir / "text.bin");
    for (int i = 0; i < 64; ++i) text << "root:x:0:0:root:/root:/bin/bash\n";
  }
  auto problems = [&](const std::string& train, const std::string& extra = "") {
    return check_recipe_data(expand_sweep(parse_recipe_text(
        "[model]\nseq_len = 32\nvocab_size = 256\n[data]\ntrain = \"" + d + "/" + train + "\"\nval = \"\"\n" + extra,
        "s.toml")));
  };
  EXPECT_TRUE(problems("ok.bin").empty());
  auto p = problems("short.bin");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "token shard " + d + "/short.bin has 20 tokens, fewer than seq_len + 1 = 33 needed for one (input, "
                  "target) window (data.train)");
  p = problems("wide.bin");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "token shard " + d + "/wide.bin has token 300 at position 4000, outside model.vocab_size = 256 (data.train)");
  // Not a shard: said without quoting the file's bytes.
  p = problems("text.bin");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("text.bin is not a precon/llm.c token shard"), std::string::npos) << p[0];
  EXPECT_EQ(p[0].find("root"), std::string::npos) << p[0];
  // A sweep over seq_len: only the trials the file is too short for are named.
  p = problems("short.bin", "[sweep.parameters]\n\"model.seq_len\" = [8, 32]\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("used by trial 1 (model.seq_len=32)"), std::string::npos) << p[0];
  fs::remove_all(dir);
}

TEST(Sweep, CheckRecipeMemoryRefusesModelsThatCannotFit) {
  // GPT-2, 2 layers of d_model C = 256: 12·C² weights and 13·C biases and norms a layer, the embedding
  // (1000 × C), the positions (8 × C) and the final norm; AdamW keeps 16 bytes a weight with its gradient.
  // One sequence of 8 tokens a step: its activations (437 KB) are 1.5 % of that.
  const std::string base = "[model]\nn_layer = 2\nd_model = 256\nn_head = 4\nseq_len = 8\nvocab_size = 1000\n"
                           "[train]\nbatch_size = 1\n";
  auto check = [&](const std::string& extra, double machine) {
    return check_recipe_memory(expand_sweep(parse_recipe_text(base + extra, "m.toml")), machine);
  };
  const int64_t params = 2 * (12 * 256 * 256 + 13 * 256) + 1000 * 256 + 8 * 256 + 2 * 256;
  EXPECT_TRUE(check("", 1e9).empty());
  auto p = check("", 1e6);  // a machine of 1 MB
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("state and activations need"), std::string::npos) << p[0];
  for (const char* part : {"per rank parameters ", "gradients ", "optimizer state ", "activations "})
    EXPECT_NE(p[0].find(part), std::string::npos) << part << ": " << p[0];
  EXPECT_NE(p[0].find("more than this machine's 976.6 KiB"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find(std::to_string(params) + " parameters"), std::string::npos) << p[0] << " want " << params;
  // resources.mem rules when given; an unknown machine and no resources.mem check nothing.
  EXPECT_TRUE(check("[resources]\nmem = \"1G\"\n", 1e6).empty());
  p = check("[resources]\nmem = \"1M\"\n", 1e12);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("more than resources.mem = 1M"), std::string::npos) << p[0];
  EXPECT_TRUE(check("", 0).empty());
  // Pipeline parallelism splits the weights (its first stage, with the embedding, holds 58 % of
  // them here); tensor parallelism splits the matrices and the vocabulary (a TP4 rank holds a
  // quarter of them and the replicated norms, biases and positions whole), so TP4 fits in a
  // third of one process's memory and not in a fifth. A sweep names the trials that do not fit,
  // grouped.
  const double one_rank = 16.0 * static_cast<double>(params);
  const std::string slurm4 = "[resources]\nexecutor = \"slurm\"\nnodes = 4\nntasks_per_node = 1\nmem = \"";
  auto megabytes = [](double bytes) { return std::to_string(static_cast<int64_t>(bytes / (1 << 20)) + 1) + "M\"\n"; };
  EXPECT_TRUE(check("[parallel]\ntensor = 4\n" + slurm4 + megabytes(one_rank / 3), 0).empty());
  EXPECT_EQ(check("[parallel]\ntensor = 4\n" + slurm4 + megabytes(one_rank / 5), 0).size(), 1u);
  EXPECT_TRUE(check("[parallel]\npipeline = 2\n[resources]\nexecutor = \"slurm\"\nnodes = 2\nntasks_per_node = 1\nmem = \"" +
                        megabytes(0.6 * one_rank), 0)
                  .empty());
  EXPECT_EQ(check("[resources]\nexecutor = \"slurm\"\nmem = \"" +
                      std::to_string(static_cast<int64_t>(one_rank / 3 / (1 << 20)) + 1) + "M\"\n",
                  0)
                .size(),
            1u);
  p = check("[sweep.parameters]\n\"model.n_layer\" = [1, 2, 200]\n\"train.seed\" = [1, 2]\n", 60e6);
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("; in trial 4 (model.n_layer=200 train.seed=1), trial 5 (model.n_layer=200 train.seed=2)"),
            std::string::npos)
      << p[0];
}

}  // namespace
}  // namespace precon::orch

namespace precon::orch {
namespace {
TEST(Sweep, CheckRecipeMemoryCountsTheActivations) {
  // A small GPT-2 (4 layers of d_model 256, 4 heads, 8.9M parameters: 142 MB with AdamW) at 512
  // sequences of 1024 tokens: the attention probabilities alone are 512·4·1024² floats a block
  // (8.6 GB), and the logits 512·1024·50304 (105 GB). Refused on a 16 GiB machine, naming the
  // activations; at 8 sequences of 256 it fits.
  const std::string model = "[model]\nn_layer = 4\nd_model = 256\nn_head = 4\nvocab_size = 50257\n";
  auto check = [&](const std::string& train) {
    return check_recipe_memory(expand_sweep(parse_recipe_text(model + train, "m.toml")), 16.0 * (1 << 30));
  };
  const auto p = check("seq_len = 1024\n[train]\nbatch_size = 512\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("activations "), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("train.micro_batch_size"), std::string::npos) << p[0];
  EXPECT_TRUE(check("seq_len = 256\n[train]\nbatch_size = 8\n").empty());
}
}  // namespace
}  // namespace precon::orch
