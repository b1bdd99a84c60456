// The loader over Megatron indexed datasets and weighted blends: windows that cross documents as
// Megatron's GPT dataset draws them, file order under "eod", draws in proportion to the weights,
// exact resume (in the loader and after a SIGKILLed training run), and bad blends refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/common/temp_dir.h"
#include "tests/common/test_util.h"
#include "worker/common/error.h"
#include "worker/config/parse.h"
#include "worker/data/indexed.h"
#include "worker/data/loader.h"

namespace precon::worker {
namespace {

using test::TempDir;

// Document d of `lengths` holds tokens d*1000 + position: a window's origin reads back.
std::string write_documents(const fs::path& dir, const std::string& name, const std::vector<int>& lengths,
                            int base = 0) {
  const std::string prefix = (dir / name).string();
  IndexedWriter w(prefix, TokenDType::int32);
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> t(static_cast<size_t>(lengths[d]));
    for (int i = 0; i < lengths[d]; ++i) t[static_cast<size_t>(i)] = base + static_cast<int32_t>(d) * 1000 + i;
    w.add_document(t);
  }
  w.finish();
  return prefix;
}

const std::vector<int> kLengths = {37, 5, 120, 64, 1, 90, 33, 71, 16, 58};  // 495 tokens

LoaderOptions one_dataset(const std::string& prefix, int64_t B, int64_t T) {
  LoaderOptions o;
  o.train = {DatasetSpec({prefix})};
  o.B = B;
  o.T = T;
  o.seed = 99;
  return o;
}

// The whole row (inputs, then the last target): T + 1 tokens.
std::vector<int32_t> row_of(const Batch& b, int64_t r) {
  std::vector<int32_t> out(b.inputs.begin() + r * b.T, b.inputs.begin() + (r + 1) * b.T);
  out.push_back(b.targets[static_cast<size_t>((r + 1) * b.T - 1)]);
  return out;
}

TEST(DataBlend, MegatronWindowsCrossDocumentsInAShuffledOrderAndCoverTheEpoch) {
  TempDir dir;
  const std::string prefix = write_documents(dir.path, "web", kLengths);
  const int64_t T = 16, W = (495 - 1) / T;  // 30 windows
  DataLoader loader(one_dataset(prefix, 1, T));
  ASSERT_EQ(loader.train_windows(), W);
  std::vector<std::map<int32_t, int32_t>> next_doc(2);  // per epoch: the document after each in its stream
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::map<int32_t, int> covered;  // token -> times it was an input
    for (int64_t i = 0; i < W; ++i) {
      const std::vector<int32_t> row = row_of(loader.next(), 0);
      for (size_t t = 0; t + 1 < row.size(); ++t) ++covered[row[t]];
      for (size_t t = 1; t < row.size(); ++t) {
        const int32_t doc = row[t - 1] / 1000, pos = row[t - 1] % 1000;
        if (pos + 1 < kLengths[static_cast<size_t>(doc)]) {
          ASSERT_EQ(row[t], row[t - 1] + 1) << "inside a document the tokens follow each other";
        } else {
          ASSERT_EQ(row[t] % 1000, 0) << "after a document's last token the next document starts";
          ASSERT_NE(row[t] / 1000, doc);
        }
        if (row[t] % 1000 == 0) next_doc[static_cast<size_t>(epoch)][row[t - 1] / 1000] = row[t] / 1000;
      }
    }
    // Every token of the epoch's stream is an input once, but the last (494 = 30·16 + 14: the tail).
    EXPECT_EQ(covered.size(), static_cast<size_t>(W * T));
    for (const auto& [token, n] : covered) ASSERT_EQ(n, 1) << token;
  }
  EXPECT_EQ(loader.epoch(), 2u);
  // The epochs lay the documents out in shuffled orders, different from the file's and each other's.
  std::map<int32_t, int32_t> file_order;
  for (int32_t d = 0; d + 1 < static_cast<int32_t>(kLengths.size()); ++d) file_order[d] = d + 1;
  EXPECT_GE(next_doc[0].size(), 5u);
  EXPECT_NE(next_doc[0], file_order);
  EXPECT_NE(next_doc[0], next_doc[1]);
}

TEST(DataBlend, EodModeKeepsFileOrderAndValReadsInOrder) {
  TempDir dir;
  const std::string prefix = write_documents(dir.path, "web", kLengths);
  std::vector<int32_t> stream;  // the file's documents end to end: the reference
  for (size_t d = 0; d < kLengths.size(); ++d)
    for (int i = 0; i < kLengths[d]; ++i) stream.push_back(static_cast<int32_t>(d) * 1000 + i);
  const int64_t T = 16, W = (495 - 1) / T;
  LoaderOptions o = one_dataset(prefix, 2, T);
  o.shuffle_documents = false;
  o.val = {DatasetSpec({prefix})};
  DataLoader loader(o);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < W / 2; ++i) {
    const Batch b = loader.next();
    for (int64_t r = 0; r < 2; ++r) {
      const std::vector<int32_t> row = row_of(b, r);
      const auto at = std::find(stream.begin(), stream.end(), row[0]) - stream.begin();
      ASSERT_EQ(at % T, 0) << "a window starts at a multiple of seq_len of the stream";
      ASSERT_TRUE(std::equal(row.begin(), row.end(), stream.begin() + at));
      seen.insert(at / T);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), W);
  // Validation: window k of the file-order stream, in order.
  const std::vector<Batch> val = loader.val_batches(3);
  for (int64_t k = 0; k < 6; ++k) {
    const std::vector<int32_t> row = row_of(val[static_cast<size_t>(k / 2)], k % 2);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), stream.begin() + k * T)) << k;
  }
}

TEST(DataBlend, DrawsFollowTheWeightsAndResumeExactly) {
  TempDir dir;
  const std::string web = write_documents(dir.path, "web", kLengths);
  const std::string code = write_documents(dir.path, "code", {300, 200, 211}, 500000);
  LoaderOptions o;
  o.train = {DatasetSpec({web}, 0.7), DatasetSpec({code}, 0.3)};
  o.B = 8;
  o.T = 16;
  o.seed = 5;
  DataLoader loader(o);
  const int N = 2500;  // batches: 20,000 samples
  for (int i = 0; i < N; ++i) {
    const Batch b = loader.next();
    for (int64_t r = 0; r < 8; ++r) ASSERT_EQ(b.inputs[static_cast<size_t>(r * 16)] >= 500000, b.targets[static_cast<size_t>(r * 16)] >= 500000);
  }
  const auto seen = loader.tokens_seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, "web");
  EXPECT_EQ(seen[1].first, "code");
  const double n = 8.0 * N, share = static_cast<double>(seen[0].second) / 16.0 / n;
  // Binomial: σ = √(0.7·0.3/n) = 0.0032; 4σ is 0.013.
  EXPECT_NEAR(share, 0.7, 4 * std::sqrt(0.21 / n)) << share;
  EXPECT_EQ(seen[0].second + seen[1].second, static_cast<int64_t>(n) * 16);

  // Resume: a new loader restored from the state (through JSON) continues exactly.
  DataLoader a(o), b(o);
  for (int i = 0; i < 37; ++i) a.next();
  const nlohmann::json state = a.state();
  ASSERT_EQ(state["datasets"].size(), 2u);
  b.restore(state.get<LoaderState>());
  for (int i = 0; i < 50; ++i) {
    const Batch x = a.next(), y = b.next();
    ASSERT_EQ(x.inputs, y.inputs) << i;
    ASSERT_EQ(x.targets, y.targets) << i;
  }
  // A state from another blend is refused with the reason.
  LoaderOptions other = o;
  other.train.pop_back();
  DataLoader c(other);
  try {
    c.restore(state.get<LoaderState>());
    FAIL() << "restored a two-dataset state into one dataset";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("training windows"), std::string::npos) << e.what();
  }
}

TEST(DataBlend, ValidationBlendIsFixedAndBadWeightsAreRefused) {
  TempDir dir;
  const std::string web = write_documents(dir.path, "web", kLengths);
  const std::string code = write_documents(dir.path, "code", {300, 200, 211}, 500000);
  LoaderOptions o = one_dataset(web, 4, 16);
  o.val = {DatasetSpec({web}, 1.0), DatasetSpec({code}, 1.0)};
  DataLoader a(o);
  o.seed = 6;  // validation does not move with train.seed
  DataLoader b(o);
  const auto x = a.val_batches(a.max_val_batches()), y = b.val_batches(b.max_val_batches());
  ASSERT_EQ(x.size(), y.size());
  int from_code = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    EXPECT_EQ(x[k].inputs, y[k].inputs);
    for (int64_t r = 0; r < 4; ++r) from_code += x[k].inputs[static_cast<size_t>(r * 16)] >= 500000;
  }
  EXPECT_GT(from_code, 0);
  EXPECT_LT(from_code, static_cast<int>(x.size()) * 4);
  // One val dataset runs out first: at most min over d of windows_d / share_d draws in all.
  EXPECT_LE(a.max_val_batches() * 4, 30 + 44);

  o.train[0].weight = 0;
  try {
    DataLoader bad(o);
    FAIL() << "a zero weight was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("weights must be positive"), std::string::npos) << e.what();
  }
}

TEST(DataBlend, RecipeFormsParseAndBadBlendsNameTheKeyAndLine) {
  const ParsedConfig p = parse_config_text(
      "[data]\ntrain = [{path = \"web\", weight = 0.7}, {path = \"code\", weight = 0.3}]\nval = \"v\"\n", "r.toml");
  ASSERT_EQ(p.config.data.train.size(), 2u);
  EXPECT_EQ(p.config.data.train[1].path, "code");
  EXPECT_DOUBLE_EQ(p.config.data.train[1].weight, 0.3);
  // Written back as TOML and read again: the same blend.
  const ParsedConfig q = parse_config_text(config_to_toml(p.config), "again.toml");
  EXPECT_EQ(q.config.data.train, p.config.data.train);
  EXPECT_EQ(q.config.data.val, p.config.data.val);
  auto refused = [](const std::string& toml) {
    try {
      parse_config_text(toml, "bad.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string m = refused("[data]\n\ntrain = [{path = \"web\", weight = 0}]\n");
  EXPECT_NE(m.find("bad.toml:3"), std::string::npos) << m;
  EXPECT_NE(m.find("data.train"), std::string::npos) << m;
  EXPECT_NE(m.find("weight must be a positive number"), std::string::npos) << m;
  m = refused("[data]\ntrain = [{path = \"web\", weight = -1.5}]\n");
  EXPECT_NE(m.find("weight must be a positive number"), std::string::npos) << m;
  m = refused("[data]\ntrain = [{path = \"web\", wieght = 1}]\n");
  EXPECT_NE(m.find("unknown key \"wieght\""), std::string::npos) << m;
  m = refused("[data]\ntrain = [{weight = 1}]\n");
  EXPECT_NE(m.find("has no path"), std::string::npos) << m;
  m = refused("[data]\ntrain = 5\n");
  EXPECT_NE(m.find("expected a path or a blend"), std::string::npos) << m;
  m = refused("[data]\nformat = \"parquet\"\n");
  EXPECT_NE(m.find("data.format"), std::string::npos) << m;
}

// A training run on a two-dataset Megatron blend, SIGKILLed after step 9 and resumed from its
// step-6 checkpoint: every loss is bitwise the uninterrupted run's, and tokens_seen per dataset
// adds up to the steps' tokens.
TEST(DataBlend, BlendRunResumesBitwiseAfterSigkill) {
  TempDir dir;
  std::mt19937 rng(3);
  auto corpus = [&](const std::string& name, int docs, int period) {
    IndexedWriter w((dir.path / name).string(), TokenDType::uint16);
    for (int d = 0; d < docs; ++d) {
      std::vector<int32_t> t(static_cast<size_t>(40 + rng() % 80));
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i % period) * 3 + (rng() % 5 == 0 ? rng() % 40 : 0)) % 61;
      w.add_document(t);
    }
    w.finish();
    return (dir.path / name).string();
  };
  const std::string web = corpus("web", 60, 13), code = corpus("code", 40, 7), val = corpus("val", 20, 13);
  const fs::path cfg = dir.path / "blend.toml";
  std::ofstream(cfg) << "[model]\nn_layer = 1\nn_head = 2\nd_model = 16\nseq_len = 16\nvocab_size = 61\n"
                     << "[data]\ntrain = [{path = \"" << web << "\", weight = 0.7}, {path = \"" << code
                     << "\", weight = 0.3}]\nval = \"" << val << "\"\n"
                     << "[train]\nsteps = 12\nbatch_size = 8\neval_every = 6\neval_batches = 2\n"
                     << "checkpoint_every = 6\nthreads = 1\n[optimizer]\nname = \"adamw\"\nlr = 0.003\n";
  auto trainer = [&](const std::string& run) {
    return std::string(PRECON_TRAIN_BIN) + " --config " + cfg.string() + " --run-dir " + (dir.path / run).string();
  };
  auto series = [&](const std::string& run, const std::string& metric) {
    std::map<int, double> out;
    std::ifstream in(dir.path / run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains(metric)) out[j["step"].get<int>()] = j[metric].get<double>();
    }
    return out;
  };
  test::CommandResult r = test::run_command(trainer("one"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = test::run_command("PRECON_FAULT_KILL_AT=step:9 " + trainer("killed"));
  EXPECT_NE(r.status, 0) << "the fault hook did not kill the run";
  r = test::run_command(trainer("killed"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_EQ(series("killed", "train_loss"), series("one", "train_loss"));
  EXPECT_EQ(series("killed", "val_loss"), series("one", "val_loss"));
  const auto w = series("one", "tokens_seen.web"), c = series("one", "tokens_seen.code");
  ASSERT_EQ(w.size(), 12u);
  EXPECT_EQ(w.at(12) + c.at(12), 12.0 * 8 * 16);
  EXPECT_EQ(series("killed", "tokens_seen.web"), w);
  // 96 draws at 0.7: σ = 0.047; the share lies within 4σ.
  EXPECT_NEAR(w.at(12) / (12.0 * 8 * 16), 0.7, 4 * std::sqrt(0.21 / 96));
}

}  // namespace
}  // namespace precon::worker
