// The pipeline schedule's order, on its own: the orders of small cases written out by hand from
// Megatron's 1F1B and interleaved 1F1B; every rank's order run together as the messages between
// virtual stages allow (a forward waits for the previous virtual stage's forward of its
// micro-batch, a backward for its own forward and the next virtual stage's backward), which must
// finish (no rank waits on a message that is never sent) and, with unit-cost passes, take exactly
// the bubble the literature gives: (p − 1)/m for 1F1B, (p − 1)/(m·v) interleaved; and the slots
// each chunk needs, against a count of the micro-batches it holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "worker/parallel/pipeline_schedule.h"

namespace precon::worker {
namespace {

std::string text(const std::vector<PipelineOp>& order) {
  std::string out;
  for (const PipelineOp& op : order)
    out += (out.empty() ? "" : " ") + std::string(op.forward ? "F" : "B") + std::to_string(op.chunk) + "." +
           std::to_string(op.micro);
  return out;
}

TEST(PipelineSchedule, OneChunkIsMegatrons1F1B) {
  // Two stages, four micro-batches: stage 0 warms up with one forward, stage 1 with none.
  EXPECT_EQ(text(pipeline_order(0, 2, 1, 4)), "F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3");
  EXPECT_EQ(text(pipeline_order(1, 2, 1, 4)), "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3");
  // Fewer micro-batches than warm-up forwards: all forwards, then all backwards.
  EXPECT_EQ(text(pipeline_order(0, 4, 1, 2)), "F0.0 F0.1 B0.0 B0.1");
  EXPECT_EQ(pipeline_slots(0, 4, 1, 8), std::vector<int>{4});
  EXPECT_EQ(pipeline_slots(3, 4, 1, 8), std::vector<int>{1});
}

TEST(PipelineSchedule, TwoChunksAreMegatronsInterleaved1F1B) {
  // Two stages, two chunks, four micro-batches. Forwards take groups of two micro-batches per
  // chunk (chunk 0: 0, 1; chunk 1: 0, 1; chunk 0: 2, 3; ...), backwards the chunks in reverse.
  // Stage 0 warms up with (2 − 0 − 1)·2 + (2 − 1)·2 = 4 forwards, stage 1 with 2.
  EXPECT_EQ(text(pipeline_order(0, 2, 2, 4)),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3");
  EXPECT_EQ(text(pipeline_order(1, 2, 2, 4)),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3");
  // As many micro-batches as stages: every forward first.
  EXPECT_EQ(text(pipeline_order(1, 2, 2, 2)), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
  EXPECT_THROW(pipeline_order(0, 2, 2, 3), std::invalid_argument);
}

// Runs every rank's order together with the given pass costs (a forward through a chunk `fwd`, a
// backward `bwd`), each pass as soon as its rank is free and its inputs have arrived (messages
// take no time). Returns the time the last pass ends, or -1 when the ranks wait on each other.
double run_schedule(int stages, int chunks, int64_t m, double fwd, double bwd) {
  const int vstages = stages * chunks;
  std::vector<std::vector<PipelineOp>> orders;
  for (int p = 0; p < stages; ++p) orders.push_back(pipeline_order(p, stages, chunks, m));
  // Done passes by (forward, virtual stage, micro-batch): their end times.
  std::map<std::tuple<bool, int, int64_t>, double> done;
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<double> free(static_cast<size_t>(stages), 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int p = 0; p < stages; ++p) {
      auto& at = next[static_cast<size_t>(p)];
      while (at < orders[static_cast<size_t>(p)].size()) {
        const PipelineOp& op = orders[static_cast<size_t>(p)][at];
        const int s = op.chunk * stages + p;
        std::vector<std::tuple<bool, int, int64_t>> needs;
        if (op.forward && s > 0) needs.emplace_back(true, s - 1, op.micro);
        if (!op.forward) {
          needs.emplace_back(true, s, op.micro);
          if (s < vstages - 1) needs.emplace_back(false, s + 1, op.micro);
        }
        double start = free[static_cast<size_t>(p)];
        bool ready = true;
        for (const auto& n : needs) {
          auto it = done.find(n);
          if (it == done.end()) ready = false;
          else start = std::max(start, it->second);
        }
        if (!ready) break;
        const double end = start + (op.forward ? fwd : bwd);
        EXPECT_TRUE(done.emplace(std::make_tuple(op.forward, s, op.micro), end).second) << "pass run twice";
        free[static_cast<size_t>(p)] = end;
        ++at;
        moved = true;
      }
    }
  }
  for (int p = 0; p < stages; ++p)
    if (next[static_cast<size_t>(p)] != orders[static_cast<size_t>(p)].size()) return -1;
  EXPECT_EQ(done.size(), static_cast<size_t>(2 * vstages * m));
  return *std::max_element(free.begin(), free.end());
}

TEST(PipelineSchedule, EveryLayoutFinishesWithTheTheoreticalBubble) {
  for (int P : {2, 3, 4}) {
    for (int V : {1, 2, 3}) {
      for (int64_t m : {int64_t{P}, int64_t{2 * P}, int64_t{4 * P}}) {
        SCOPED_TRACE("P=" + std::to_string(P) + " V=" + std::to_string(V) + " m=" + std::to_string(m));
        // A chunk is 1/V of a stage: forward 1/V, backward 2/V.
        const double fwd = 1.0 / V, bwd = 2.0 / V, busy = static_cast<double>(m) * 3.0;
        const double makespan = run_schedule(P, V, m, fwd, bwd);
        ASSERT_GT(makespan, 0) << "the ranks wait on each other";
        EXPECT_NEAR((makespan - busy) / busy, (P - 1.0) / static_cast<double>(m * V), 1e-9);
      }
    }
  }
}

// Messages between two ranks are matched in the order they were posted, whatever they carry, and
// an activation and a gradient have the same size: the receiver must ask for them in the order the
// sender sends them, or it takes one for the other without an error. With two stages and chunks,
// rank 1 sends rank 0 both (its chunks' outputs forwards, their input gradients backwards).
TEST(PipelineSchedule, EveryChannelReceivesInTheOrderItsPeerSends) {
  using Message = std::tuple<char, int, int64_t>;  // (activation or gradient, sending virtual stage, micro-batch)
  for (int P : {2, 3, 4}) {
    for (int V : {1, 2, 3, 4}) {
      for (int64_t m : {int64_t{P}, int64_t{2 * P}, int64_t{3 * P}, int64_t{8 * P}}) {
        const int S = P * V;
        std::map<std::pair<int, int>, std::vector<Message>> sent, received;  // by (from, to)
        for (int p = 0; p < P; ++p) {
          const int prev = (p + P - 1) % P, next = (p + 1) % P;
          for (const PipelineOp& op : pipeline_order(p, P, V, m)) {
            const int s = op.chunk * P + p;
            if (op.forward) {
              if (s > 0) received[{prev, p}].emplace_back('a', s - 1, op.micro);
              if (s < S - 1) sent[{p, next}].emplace_back('a', s, op.micro);
            } else {
              if (s < S - 1) received[{next, p}].emplace_back('g', s + 1, op.micro);
              if (s > 0) sent[{p, prev}].emplace_back('g', s, op.micro);
            }
          }
        }
        EXPECT_EQ(sent, received) << "P=" << P << " V=" << V << " m=" << m;
      }
    }
  }
}

TEST(PipelineSchedule, SlotsCoverEveryMicroBatchAChunkHolds) {
  for (int P : {2, 4}) {
    for (int V : {1, 2, 3}) {
      const int64_t m = 2 * P;
      for (int p = 0; p < P; ++p) {
        std::vector<int> held(static_cast<size_t>(V), 0), most(static_cast<size_t>(V), 1);
        std::vector<std::vector<int64_t>> open(static_cast<size_t>(V));
        for (const PipelineOp& op : pipeline_order(p, P, V, m)) {
          auto& mine = open[static_cast<size_t>(op.chunk)];
          if (op.forward) {
            // Micro-batches enter a chunk in order and leave it in order: slot = micro mod slots.
            if (!mine.empty()) {
              EXPECT_EQ(op.micro, mine.back() + 1);
            }
            mine.push_back(op.micro);
          } else {
            ASSERT_FALSE(mine.empty());
            EXPECT_EQ(op.micro, mine.front());
            mine.erase(mine.begin());
          }
          most[static_cast<size_t>(op.chunk)] =
              std::max(most[static_cast<size_t>(op.chunk)], static_cast<int>(mine.size()));
        }
        EXPECT_EQ(pipeline_slots(p, P, V, m), most) << "P=" << P << " V=" << V << " stage " << p;
      }
    }
  }
  // Interleaving holds more activations: with two chunks the first of four stages keeps eight
  // micro-batches in its first chunk and four in its second (with one chunk, four in all).
  EXPECT_EQ(pipeline_slots(0, 4, 2, 8), (std::vector<int>{8, 4}));
}

}  // namespace
}  // namespace precon::worker
