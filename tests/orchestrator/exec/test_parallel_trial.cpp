// A trial whose layout needs two ranks, run by a live controller on the local executor: mpirun
// starts both ranks, the trial takes 2 × threads CPU slots, one rank reports, every metric reaches
// the store once, and the loss follows the same trial run as one process.
#include <cmath>
#include <cstdlib>

#include "orchestrator/service/controller.h"
#include "orchestrator/store/store.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class ParallelTrial : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    // For the ranks this controller starts (this process read its options already): OpenMPI's
    // plugins leave allocations LeakSanitizer cannot attribute (tests/worker/parallel/test_data_tensor.cpp).
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  std::unique_ptr<orch::Controller> start(int cpu_slots) {
    auto c = std::make_unique<orch::Controller>(controller_options(cpu_slots));
    c->start();
    return c;
  }
};

TEST_F(ParallelTrial, TwoRanksThroughMpirunReportOnceAndFollowOneProcess) {
  auto c = start(2);
  const std::string url = c->url();
  // The same trial twice: one process, and two data-parallel ranks.
  const int64_t id = submit(url, recipe(12, "[sweep]\nmax_concurrent = 1\n[sweep.parameters]\n\"parallel.data\" = [1, 2]\n"));
  ASSERT_GT(id, 0);
  ASSERT_TRUE(done(url, id));
  json trials = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 2u);
  std::vector<json> losses;
  for (const json& t : trials) {
    const std::string tid = std::to_string(t["id"].get<int64_t>());
    json full = get(url, "/api/v1/trials/" + tid);
    EXPECT_EQ(full["state"], "completed") << full.dump();
    json m = get(url, "/api/v1/trials/" + tid + "/metrics?name=train_loss&max_points=0")["metrics"]["train_loss"];
    EXPECT_EQ(m["steps"].size(), 12u) << "each step once";
    losses.push_back(m["values"]);
  }
  for (size_t i = 0; i < 12; ++i) {
    const double a = losses[0][i], b = losses[1][i];
    EXPECT_LT(std::fabs(a - b) / a, 2e-5) << "step " << i + 1;  // fp32 reassociation (tests/worker/parallel/test_data_tensor.cpp)
  }
  // Both ranks ran under mpirun; the second rank's lines carry its rank.
  const std::string two = std::to_string(trials[1]["id"].get<int64_t>());
  json logs = get(url, "/api/v1/trials/" + two + "/logs?stream=stderr&lines=200");
  EXPECT_NE(logs["text"].get<std::string>().find("rank 1: layout: 2 data-parallel rank(s) over mpi"), std::string::npos)
      << logs.dump();
}

#ifdef PRECON_BIN
// Rank 1 of two SIGKILLs itself after step 3 (worker/common/fault_hook.h); mpirun ends the job
// with exit code 137, and the trial's reason says which rank died of which signal, from mpirun's
// own line in the log.
TEST_F(ParallelTrial, AKilledRankIsNamedWithItsSignalInTheTrialsReason) {
  struct Fault {
    Fault() {
      ::setenv("PRECON_FAULT_KILL_AT", "step:3", 1);
      ::setenv("PRECON_FAULT_KILL_RANK", "1", 1);
    }
    ~Fault() {
      ::unsetenv("PRECON_FAULT_KILL_AT");
      ::unsetenv("PRECON_FAULT_KILL_RANK");
    }
  } fault;
  auto c = start(2);
  const std::string url = c->url();
  const int64_t id =
      submit(url, recipe(12, "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n\"parallel.data\" = [2]\n"));
  ASSERT_GT(id, 0);
  ASSERT_TRUE(done(url, id));
  const json trials = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 1u);
  const json t = get(url, "/api/v1/trials/" + std::to_string(trials[0]["id"].get<int64_t>()));
  EXPECT_EQ(t["state"], "failed") << t.dump();
  const std::string reason = t["reason"];
  EXPECT_NE(reason.find("rank 1 (on "), std::string::npos) << reason;
  EXPECT_NE(reason.find("killed by SIGKILL (signal 9)"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("rank 0 "), std::string::npos) << reason;  // the survivor is not blamed
}

TEST_F(ParallelTrial, APipelineTrialRunsThroughPreconRunAndFollowsOneProcess) {
  // `precon run` as a user starts it: the same two-layer trial as one process and as two
  // pipeline stages (the local executor counts tensor × data × pipeline ranks and starts mpirun).
  std::string text = recipe(8, "[sweep]\nmax_concurrent = 1\n[sweep.parameters]\n\"parallel.pipeline\" = [1, 2]\n");
  text.replace(text.find("n_layer = 1"), 11, "n_layer = 2");
  text.replace(text.find("batch_size = 4"), 14, "batch_size = 4\nmicro_batch_size = 1");
  std::ofstream(dir_ / "pp.toml") << text;
  const test::CommandResult r = test::run_command(std::string(PRECON_BIN) + " run " + (dir_ / "pp.toml").string() +
                                                  " --db " + (dir_ / "precon.db").string() + " --runs " +
                                                  (dir_ / "runs").string() + " --cpus 2 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  orch::Store store(dir_ / "precon.db");
  const std::vector<TrialRow> trials = store.trials(store.experiments().at(0).id);
  ASSERT_EQ(trials.size(), 2u);
  std::vector<std::vector<MetricPoint>> losses;
  for (const TrialRow& t : trials) {
    EXPECT_EQ(t.state, TrialState::completed);
    losses.push_back(store.metrics(t.id, "train_loss"));
    EXPECT_EQ(losses.back().size(), 8u) << "each step once";
  }
  ASSERT_EQ(losses[0].size(), losses[1].size());
  for (size_t i = 0; i < losses[0].size(); ++i) {
    const double a = losses[0][i].value, b = losses[1][i].value;
    EXPECT_LT(std::fabs(a - b) / a, 2e-5) << "step " << i + 1;  // fp32 (tests/worker/parallel/test_pipeline.cpp)
  }
}
#endif

TEST_F(ParallelTrial, ALayoutLargerThanTheSlotsIsRefusedWithTheReason) {
  auto c = start(1);
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(4, "[parallel]\ndata = 2\n"));
  ASSERT_GT(id, 0);
  ASSERT_TRUE(done(url, id));
  json t = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  EXPECT_EQ(t["state"], "failed");
  json full = get(url, "/api/v1/trials/" + std::to_string(t["id"].get<int64_t>()));
  EXPECT_NE(full["reason"].get<std::string>().find("needs 2 CPU slots (2 rank(s) × 1 thread(s))"), std::string::npos)
      << full.dump();
}

TEST_F(ParallelTrial, AnInterleavedLayoutShowsItsVirtualStagesAndCountsOneRankAPipelineStage) {
  auto c = start(1);
  const std::string url = c->url();
  // Two pipeline ranks of two chunks each: 2 ranks, not 4 (more than this controller's one slot).
  std::string text = recipe(4, "[parallel]\npipeline = 2\nvirtual_stages = 2\n");
  text.replace(text.find("n_layer = 1"), 11, "n_layer = 4");
  text.replace(text.find("batch_size = 4"), 14, "batch_size = 4\nmicro_batch_size = 1");
  const int64_t id = submit(url, text);
  ASSERT_GT(id, 0);
  ASSERT_TRUE(done(url, id));
  json t = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  json full = get(url, "/api/v1/trials/" + std::to_string(t["id"].get<int64_t>()));
  EXPECT_EQ(full["layout"], (json{{"tensor", 1}, {"data", 1}, {"pipeline", 2}, {"virtual_stages", 2}, {"expert", 1}, {"ranks", 2},
                                  {"backend", "auto"}}))
      << full.dump();
  EXPECT_NE(full["reason"].get<std::string>().find("needs 2 CPU slots (2 rank(s) × 1 thread(s))"), std::string::npos)
      << full.dump();
}

}  // namespace
}  // namespace precon::orch::testing
