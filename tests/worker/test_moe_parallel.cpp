// A mixture-of-experts Llama under every layout against its single-process run: precon-train under
// `mpirun -np N` (real MPI ranks) at TP=2 (every expert's columns split, the router replicated),
// DP=2, PP=2, TP2×DP2, PP2×TP2 and expert parallelism (EP2, EP2×TP2, EP2×PP2, DP4 with EP2: the
// tokens cross the ranks by all-to-all) follow the trajectory one process follows (train and
// validation losses, the load-balancing loss and the worst expert's load) for every optimizer, with
// two micro-batches per rank (the aux loss is taken per micro-batch, so equal micro-batches give
// equal runs); checkpoints reshard TP2→TP1, PP2→PP1, EP2→EP1 and back on the same trajectory; a
// rank killed while its peers wait in the all-to-all ends the job in seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/worker/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

// Four experts of width 16 (top 2) and a shared one on both layers; four query heads sharing two
// kv heads.
const std::string kMoe =
    "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 --set model.ffn_hidden=48 "
    "--set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.ffn_hidden=16 "
    "--set model.moe.shared_experts=1 --set train.micro_batch_size=2 ";

class MoeParallel : public mpitest::MpiRunFixture {
 protected:
  Result launch(const fs::path& cfg, const std::string& name, int ranks, const std::string& sets) {
    return run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, name, kMoe + sets));
  }
  // The MoE metrics of run b against run a's, step by step.
  void expect_same_routing(const std::string& a, const std::string& b) {
    for (const char* metric : {"moe_aux_loss", "moe_load_max"}) {
      const auto x = series(a, metric), y = series(b, metric);
      ASSERT_FALSE(x.empty()) << a << " reports no " << metric;
      ASSERT_EQ(x.size(), y.size()) << b << " " << metric;
      double worst = 0;
      for (const auto& [step, v] : x) worst = std::max(worst, std::fabs(v - y.at(step)) / std::fabs(v));
      std::printf("%s vs %s %s: max relative difference %.3g\n", a.c_str(), b.c_str(), metric, worst);
      EXPECT_LT(worst, mpitest::kLossTolerance) << a << " vs " << b << " " << metric;
    }
  }
};

TEST_F(MoeParallel, EveryLayoutFollowsTheSingleProcessRunForEveryOptimizer) {
  struct Layout {
    const char* name;
    int ranks;
    const char* sets;
  };
  const Layout layouts[] = {
      {"tp2", 2, "--set parallel.tensor=2"},
      {"dp2", 2, "--set parallel.data=2"},
      {"pp2", 2, "--set parallel.pipeline=2"},
      {"tp2dp2", 4, "--set parallel.tensor=2 --set parallel.data=2"},
      {"pp2tp2", 4, "--set parallel.pipeline=2 --set parallel.tensor=2"},
      {"ep2", 2, "--set parallel.data=2 --set parallel.expert=2"},
      {"ep2tp2", 4, "--set parallel.data=2 --set parallel.expert=2 --set parallel.tensor=2"},
      {"ep2pp2", 4, "--set parallel.data=2 --set parallel.expert=2 --set parallel.pipeline=2"},
      {"dp4ep2", 4, "--set parallel.data=4 --set parallel.expert=2"},
  };
  for (const char* opt : mpitest::kOptimizers) {
    SCOPED_TRACE(opt);
    const fs::path cfg = config(opt, 10);
    Result r = launch(cfg, "one", 1, "");
    ASSERT_EQ(r.status, 0) << r.output;
    for (const Layout& l : layouts) {
      SCOPED_TRACE(l.name);
      r = launch(cfg, l.name, l.ranks, l.sets);
      ASSERT_EQ(r.status, 0) << r.output;
      expect_same_trajectory("one", l.name, 10);
      expect_same_routing("one", l.name);
      fs::remove_all(dir_ / l.name);
    }
    fs::remove_all(dir_ / "one");
  }
}

TEST_F(MoeParallel, CheckpointsReshardBetweenLayouts) {
  // Muon: each expert's momenta, split under TP and placed by stage under PP.
  const fs::path cfg = config(mpitest::kOptimizers[1], 12);
  const std::string every = " --set train.checkpoint_every=6 --set train.eval_every=6";
  ASSERT_EQ(launch(cfg, "straight", 1, every).status, 0);
  struct Case {
    const char* name;
    int first_ranks;
    const char* first;
    int second_ranks;
    const char* second;
  };
  const Case cases[] = {
      {"tp2_tp1", 2, "--set parallel.tensor=2", 1, ""},
      {"tp1_tp2", 1, "", 2, "--set parallel.tensor=2"},
      {"pp2_pp1", 2, "--set parallel.pipeline=2", 1, ""},
      {"dp1_dp2", 1, "", 2, "--set parallel.data=2"},
      {"ep2_ep1", 2, "--set parallel.data=2 --set parallel.expert=2", 1, ""},
      {"ep1_ep2", 1, "", 2, "--set parallel.data=2 --set parallel.expert=2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result r = launch(cfg, c.name, c.first_ranks, std::string(c.first) + every + " --set train.steps=6");
    ASSERT_EQ(r.status, 0) << r.output;
    r = launch(cfg, c.name, c.second_ranks, c.second + every);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    expect_same_trajectory("straight", c.name, 12);
  }
}

TEST_F(MoeParallel, ARankKilledInTheAllToAllEndsTheJobInSeconds) {
  // Rank 1 alone carries the fault hook (mpirun's MPMD form) and SIGKILLs itself inside its 9th
  // all-to-all, while rank 0 waits in the same exchange.
  const fs::path cfg = config(mpitest::kOptimizers[0], 100000);
  const std::string sets = kMoe + "--set parallel.data=2 --set parallel.expert=2";
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = run(mpirun(1) + trainer(cfg, "killed", sets) + " : -np 1 env PRECON_FAULT_KILL_AT=alltoall:9 " +
                       trainer(cfg, "killed", sets));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank 1 killed in an all-to-all of an EP=2 job: it ended %.2f s after the launch with status %d\n", seconds,
              r.status);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(seconds, 20.0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << "the output does not name the rank:\n" << r.output;
}

}  // namespace
}  // namespace precon::worker
