// The store tests' fixture (a fresh directory and database path per test) and the rows and raw
// SQL they build databases from.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "orchestrator/store/store.h"

namespace precon::orch::testing {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("precon_store_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ / "precon.db";
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_, path_;
};

inline ExperimentRow full_experiment(const std::string& name) {
  ExperimentRow e;
  e.name = name;
  e.description = "muon vs adamw";
  e.recipe_path = "/recipes/q.toml";
  e.recipe_text = "[experiment]\nname = \"q\"\n";
  e.overrides_json = R"(["train.steps=10"])";
  e.objective_metric = "val_loss";
  e.objective_mode = "max";
  e.max_concurrent = 3;
  e.max_attempts = 2;
  e.early_stop_json = R"({"method":"asha"})";
  e.run_root = "/runs/q";
  e.created_at = 1700000000.25;
  return e;
}

inline TrialRow full_trial(int64_t index) {
  TrialRow t;
  t.index = index;
  t.params_json = R"({"optimizer.name":"muon"})";
  t.config_toml = "[train]\nsteps = 10\n";
  t.reason = "r" + std::to_string(index);
  t.run_dir = "/runs/q/" + std::to_string(index);
  t.token_hash = "tok" + std::to_string(index);
  t.attempts = index;
  t.last_step = 7;
  t.created_at = 1.5;
  t.started_at = 2.5;
  return t;
}

inline int64_t one_trial(Store& s) {
  s.create_experiment(full_experiment("e"), {full_trial(0)});
  return s.trials(s.experiment_by_name("e")->id).at(0).id;
}

// Runs SQL on a database file directly, as an older precon (or a hand) would have written it.
inline void raw_sql(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

}  // namespace precon::orch::testing
