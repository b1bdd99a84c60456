// GET /api/v1/experiments/{id}/importance over a real socket: a finished sweep
// (importance_store_seed.h) answers the same JSON as `precon importance --json` computes from the
// store, kept until its data changes; an experiment with nothing to rank answers "ok": false
// with the reason, an unknown one 404.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/study/importance_report.h"
#include "tests/orchestrator/support/importance_store_seed.h"
#include "tests/orchestrator/support/route_fixture.h"

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ImportanceRoute : public RouteFixture {
 protected:
  void SetUp() override {
    RouteFixture::SetUp();
    {
      // Seeded before the controller starts. Its one pending trial would run "prog": the sweep is
      // cancelled first so that nothing launches.
      Store store(db());
      sweep_ = seed_importance_sweep(store, (dir_ / "runs").string());
      for (TrialRow t : store.trials(sweep_))
        if (t.state == TrialState::pending) {
          t.state = TrialState::cancelled;
          store.update_trial(t);
        }
      ExperimentRow e;
      e.name = "plain";
      e.recipe_text = "[train]\nsteps = 10\n";
      e.overrides_json = "[]";
      e.state = ExperimentState::completed;
      TrialRow t;
      t.params_json = "{}";
      t.state = TrialState::completed;
      plain_ = store.create_experiment(e, {t});
    }
    start();
  }
  static std::string path(int64_t id) { return "/api/v1/experiments/" + std::to_string(id) + "/importance"; }

  int64_t sweep_ = 0, plain_ = 0;
};

TEST_F(ImportanceRoute, ASweepAnswersItsKeysImportance) {
  const json j = get(path(sweep_), 200);
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["method"], "fanova");
  EXPECT_EQ(j["trials"], 58);
  ASSERT_EQ(j["importance"].size(), 3u);
  EXPECT_EQ(j["importance"][0]["name"], "lr");
  EXPECT_EQ(j["importance"][2]["name"], "unused");
  EXPECT_EQ(j["ok"], true);
  // What the CLI prints with --json, to the bit: the forest is seeded.
  json cli = study::importance_to_json(study::importance_report(controller_->store(), sweep_));
  cli["ok"] = true;
  cli["reason"] = "";
  EXPECT_EQ(j, cli);
  EXPECT_EQ(get(path(sweep_), 200), j) << "kept while nothing changed";
}

TEST_F(ImportanceRoute, NothingToRankSaysWhyAndAnUnknownExperimentIsNotFound) {
  const json j = get(path(plain_), 200);
  EXPECT_EQ(j["ok"], false) << j;
  EXPECT_NE(j["reason"].get<std::string>().find("sweeps no keys"), std::string::npos) << j;
  EXPECT_TRUE(j["importance"].empty());
  get(path(9999), 404);
}

}  // namespace
}  // namespace precon::orch::testing
