// The training loop end to end: resume continues exactly (bitwise on CPU) for every optimizer,
// signals checkpoint and ask for a requeue, damaged checkpoints fall back, bad input is clear.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/ckpt/checkpoint.h"
#include "worker/config/parse.h"
#include "worker/data/shard.h"
#include "worker/model/gpt.h"
#include "worker/model/model_io.h"
#include "worker/train/train_state.h"
#include "worker/train/trainer.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;

class Trainer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon_trainer_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A small corpus with structure (a repeated pattern plus noise) so the loss can fall.
    std::mt19937 rng(7);
    std::vector<uint16_t> tokens(6000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i % 17) * 3 + (rng() % 4 == 0 ? rng() % 60 : 0)) % 61;
    write_shard(dir_ / "train.bin", tokens);
    write_shard(dir_ / "val.bin", std::vector<uint16_t>(tokens.begin(), tokens.begin() + 1000));
    reset_requeue_signal();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path config(const std::string& optimizer_toml, int steps = 40) {
    fs::path p = dir_ / "trial.toml";
    std::ofstream(p) << "[model]\nn_layer = 2\nn_head = 2\nd_model = 32\nseq_len = 16\nvocab_size = 61\n"
                     << "[data]\ntrain = \"" << (dir_ / "train.bin").string() << "\"\nval = \""
                     << (dir_ / "val.bin").string() << "\"\n"
                     << "[train]\nsteps = " << steps << "\nbatch_size = 4\neval_every = 10\neval_batches = 2\n"
                     << "checkpoint_every = 10\nkeep_checkpoints = 3\ngrad_clip = 1.0\nthreads = 2\n"
                     << optimizer_toml;
    return p;
  }
  TrainOptions options(const fs::path& cfg, const std::string& run) {
    TrainOptions o;
    o.config_path = cfg;
    o.run_dir = dir_ / run;
    o.log = [](const std::string&) {};
    return o;
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // train_loss per step from metrics.jsonl, as text (exact comparison).
  static std::map<int, std::string> losses(const fs::path& metrics) {
    std::map<int, std::string> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      auto pos = line.find("\"train_loss\": ");
      if (pos == std::string::npos) continue;
      int step = std::stoi(line.substr(line.find("\"step\": ") + 8));
      out[step] = line.substr(pos + 14, line.find(',', pos) - pos - 14);
    }
    return out;
  }

  fs::path dir_;
};

const char* kOptimizerTables[] = {
    "[optimizer]\nname = \"adamw\"\nlr = 0.003\nweight_decay = 0.1\n",
    "[optimizer]\nname = \"muon\"\nlr = 0.02\nweight_decay = 0.01\n[optimizer.adamw]\nlr = 0.003\n",
    "[optimizer]\nname = \"shampoo\"\nlr = 0.003\n[optimizer.shampoo]\nprecondition_frequency = 5\n"
    "max_preconditioner_dim = 40\n",
};

TEST_F(Trainer, ResumeIsBitwiseIdenticalForEveryOptimizer) {
  for (const char* opt : kOptimizerTables) {
    SCOPED_TRACE(opt);
    fs::path cfg = config(opt);
    ASSERT_EQ(train(options(cfg, "straight")), TrainOutcome::completed);
    TrainOptions first = options(cfg, "split");
    first.stop_at_step = 20;
    ASSERT_EQ(train(first), TrainOutcome::requeue);
    ASSERT_EQ(train(options(cfg, "split")), TrainOutcome::completed);
    const fs::path a = dir_ / "straight/checkpoints/step_00000040", b = dir_ / "split/checkpoints/step_00000040";
    EXPECT_EQ(read(a / "model.safetensors"), read(b / "model.safetensors"));
    EXPECT_EQ(read(a / "optimizer.safetensors"), read(b / "optimizer.safetensors"));
    auto la = losses(dir_ / "straight/metrics.jsonl"), lb = losses(dir_ / "split/metrics.jsonl");
    EXPECT_EQ(la.size(), 40u);
    EXPECT_EQ(la, lb);  // the resumed run's metrics.jsonl has each step once
    EXPECT_LT(std::stod(la[40]), std::stod(la[1]));  // and it learned something
    fs::remove_all(dir_ / "straight");
    fs::remove_all(dir_ / "split");
  }
}

TEST_F(Trainer, DamagedCheckpointFallsBackToThePreviousGoodOne) {
  fs::path cfg = config(kOptimizerTables[0], 30);
  TrainOptions o = options(cfg, "run");
  o.stop_at_step = 30;
  ASSERT_EQ(train(options(cfg, "ref")), TrainOutcome::completed);
  std::vector<std::string> log;
  o.log = [&](const std::string& line) { log.push_back(line); };
  o.stop_at_step = 20;
  ASSERT_EQ(train(o), TrainOutcome::requeue);
  // Flip one bit of the newest checkpoint's optimizer state.
  fs::path victim = dir_ / "run/checkpoints/step_00000020/optimizer.safetensors";
  std::string bytes = read(victim);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes;
  o.stop_at_step = 0;
  ASSERT_EQ(train(o), TrainOutcome::completed);
  bool warned = false, resumed10 = false;
  for (const std::string& line : log) {
    warned |= line.find("step_00000020 is damaged") != std::string::npos;
    resumed10 |= line.find("at step 10") != std::string::npos;
  }
  EXPECT_TRUE(warned);
  EXPECT_TRUE(resumed10);
  EXPECT_EQ(read(dir_ / "ref/checkpoints/step_00000030/model.safetensors"),
            read(dir_ / "run/checkpoints/step_00000030/model.safetensors"));
}

TEST_F(Trainer, KeepBestProtectsTheBestCheckpoint) {
  // Maximising val_loss makes an early checkpoint the "best" one (the loss falls), so keep_best
  // must protect it while keep_checkpoints = 1 deletes the others. The expectation is computed
  // from metrics.jsonl, not from the checkpoints.
  fs::path cfg = config(std::string(kOptimizerTables[0]) + "[objective]\nmetric = \"val_loss\"\nmode = \"max\"\n", 50);
  TrainOptions o = options(cfg, "run");
  o.overrides = {"train.keep_checkpoints=1", "train.keep_best=1"};
  ASSERT_EQ(train(o), TrainOutcome::completed);
  std::map<int, double> val;
  std::ifstream in(dir_ / "run/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto pos = line.find("\"val_loss\": ");
    if (pos == std::string::npos) continue;
    val[std::stoi(line.substr(line.find("\"step\": ") + 8))] = std::stod(line.substr(pos + 12));
  }
  ASSERT_EQ(val.size(), 5u);
  int best = val.begin()->first;
  for (auto [step, v] : val)
    if (v > val[best]) best = step;
  ASSERT_NE(best, 50) << "the loss did not fall; the test needs an early maximum";
  std::vector<int64_t> left;
  for (const CheckpointInfo& c : list_checkpoints(dir_ / "run")) left.push_back(c.step);
  EXPECT_EQ(left, (std::vector<int64_t>{best, 50}));
  auto objective = checkpoint_objective(dir_ / "run/checkpoints" / checkpoint_dir_name(best));
  ASSERT_TRUE(objective.has_value());
  EXPECT_NEAR(*objective, val[best], 1e-6 * std::abs(val[best]));
}

TEST_F(Trainer, SigusrCheckpointsAndExitsWithRequeueCode) {
  fs::path cfg = config(kOptimizerTables[0], 100000);
  // A real precon-train process (forking this multi-threaded test process would not be safe).
  pid_t child = fork();
  if (child == 0) {
    const std::string run = (dir_ / "run").string(), c = cfg.string();
    execl(PRECON_TRAIN_BIN, PRECON_TRAIN_BIN, "--config", c.c_str(), "--run-dir", run.c_str(), (char*)nullptr);
    _exit(127);
  }
  // Wait for the first checkpoint so training is under way, then signal.
  auto started = [&] { return fs::exists(dir_ / "run/checkpoints") && !list_checkpoints(dir_ / "run").empty(); };
  for (int i = 0; i < 600 && !started(); ++i) usleep(50000);
  if (!started()) kill(child, SIGKILL);
  ASSERT_TRUE(started());
  kill(child, SIGUSR1);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75);
  auto list = list_checkpoints(dir_ / "run");
  ASSERT_FALSE(list.empty());
  EXPECT_GE(list.back().step, 10);
  EXPECT_LT(list.back().step, 100000);
  EXPECT_FALSE(verify_checkpoint(list.back().dir).has_value());
}

TEST_F(Trainer, NonFiniteLossStopsWithStepAndLastGoodCheckpoint) {
  fs::path cfg = config(kOptimizerTables[0], 100);
  TrainOptions o = options(cfg, "run");
  ::setenv("PRECON_FAULT_NAN_LOSS_AT_STEP", "25", 1);
  try {
    train(o);
    ::unsetenv("PRECON_FAULT_NAN_LOSS_AT_STEP");
    FAIL() << "a NaN loss did not stop the run";
  } catch (const TrainingError& e) {
    ::unsetenv("PRECON_FAULT_NAN_LOSS_AT_STEP");
    std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite training loss (nan) at step 25"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the last good checkpoint is step_00000020"), std::string::npos) << msg;
  }
  auto choice = latest_good_checkpoint(dir_ / "run");
  ASSERT_TRUE(choice.checkpoint.has_value());
  EXPECT_EQ(choice.checkpoint->step, 20);
}

// NaN weights no longer reach the numerics: train.init_from refuses them when loaded (the
// non-finite loss path is NonFiniteLossStopsWithStepAndLastGoodCheckpoint's).
TEST_F(Trainer, NaNWeightsInInitFromAreAConfigurationError) {
  fs::path cfg = config(kOptimizerTables[0], 10);
  auto parsed = parse_config_file(cfg.string());
  Gpt model(parsed.config.model, 1, kernels::Device::cpu);
  model.init_random(1);
  std::vector<float> one(1, NAN);
  kernels::Tensor p = model.params().param(model.params().index("ln_f.bias"));
  kernels::copy(p.narrow(0, 0, 1), kernels::Tensor::view(one.data(), {1}));
  auto bytes = model_safetensors_bytes(model.params(), parsed.config.model);
  std::ofstream(dir_ / "nan.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  TrainOptions o = options(cfg, "run");
  o.overrides = {"train.init_from=" + (dir_ / "nan.safetensors").string()};
  try {
    train(o);
    FAIL() << "NaN weights trained";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.init_from: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor ln_f.bias holds NaN"), std::string::npos) << e.what();
  }
}

// issue 28, item 5: train.init_from = /etc/shadow said "header length 3619251681095544690 does not
// fit the file", the file's first 8 bytes, in the trainer's error line that the controller serves.
TEST_F(Trainer, InitFromAFileThatIsNotSafetensorsQuotesNoneOfIt) {
  std::string text;
  while (text.size() < 696) text += "root:$6$Zm9vYmFy$c2VjcmV0aGFzaA:19000:0:99999:7:::\n";
  text.resize(696);
  std::ofstream(dir_ / "shadow", std::ios::binary) << text;
  uint64_t first8 = 0;
  std::memcpy(&first8, text.data(), 8);
  TrainOptions o = options(config(kOptimizerTables[0], 10), "run");
  o.overrides = {"train.init_from=" + (dir_ / "shadow").string()};
  std::string msg = "(no error)";
  try {
    train(o);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find((dir_ / "shadow").string() + ": not a safetensors file (or a truncated one): its header length "
                     "does not fit the file (696 bytes)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find(std::to_string(first8)), std::string::npos) << msg;
  EXPECT_EQ(msg.find("$6$"), std::string::npos) << msg;
}

TEST_F(Trainer, RunDirectoryHoldsOneConfigFile) {
  fs::path cfg = config(kOptimizerTables[0], 10);
  // Standalone: the resolved config (overrides applied) is written as RUN_DIR/config.toml.
  TrainOptions o = options(cfg, "standalone");
  o.overrides = {"train.steps=12"};
  ASSERT_EQ(train(o), TrainOutcome::completed);
  const fs::path run = dir_ / "standalone";
  ASSERT_TRUE(fs::exists(run / "config.toml"));
  EXPECT_EQ(parse_config_file((run / "config.toml").string()).config.train.steps, 12);
  EXPECT_FALSE(fs::exists(run / "trial.toml"));
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000012/config.toml"));
  EXPECT_FALSE(fs::exists(run / "checkpoints/step_00000012/trial.toml"));
  // The controller's layout: --config is RUN_DIR/config.toml, which the trainer leaves as it is.
  fs::create_directories(dir_ / "controlled");
  const fs::path own = dir_ / "controlled/config.toml";
  fs::copy_file(cfg, own);
  std::ofstream(own, std::ios::app) << "# written by the controller\n";
  const std::string before = read(own);
  ASSERT_EQ(train(options(own, "controlled")), TrainOutcome::completed);
  EXPECT_EQ(read(own), before);
  EXPECT_FALSE(fs::exists(dir_ / "controlled/trial.toml"));
}

TEST_F(Trainer, MissingDataAndBadConfigAreClearErrors) {
  fs::path cfg = config(kOptimizerTables[0]);
  TrainOptions o = options(cfg, "run");
  o.overrides = {"data.train=/nonexistent/train.bin"};
  try {
    train(o);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/train.bin"), std::string::npos) << e.what();
  }
  o.overrides = {"optimizer.muon.ns_step=5"};
  EXPECT_THROW(train(o), ConfigError);
}

}  // namespace
}  // namespace precon::worker
