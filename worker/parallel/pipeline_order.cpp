// The schedule's order and slot counts: pure arithmetic, apart from the schedule itself so that
// the memory estimate (and what links it without the trainer, the fuzz targets) can use them.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/parallel/pipeline_schedule.h"

namespace precon::worker {

std::vector<PipelineOp> pipeline_order(int stage, int stages, int chunks, int64_t m) {
  if (chunks > 1 && m % stages != 0)
    throw std::invalid_argument("interleaved pipeline: " + std::to_string(m) + " micro-batches are not a multiple of " +
                                std::to_string(stages) + " stages");
  // Chunk-micro-batch k (of m·V) is micro-batch (k / (P·V))·P + k mod P, through chunk
  // (k mod (P·V)) / P forwards and V − 1 minus that backwards (Megatron's interleaved order;
  // with one chunk, micro-batch k through the one chunk).
  const int64_t P = stages, V = chunks, total = m * V;
  const auto op = [&](int64_t k, bool forward) {
    const int64_t chunk = (k % (P * V)) / P;
    return PipelineOp{forward, static_cast<int>(forward ? chunk : V - 1 - chunk), (k / (P * V)) * P + k % P};
  };
  // Warm-up forwards before the first backward: one chunk, the stages after this one; several,
  // twice that plus a round of P for every chunk but one (all of them when m = P).
  int64_t warmup = V == 1 ? P - stage - 1 : (m == P ? total : (P - stage - 1) * 2 + (V - 1) * P);
  warmup = std::min(warmup, total);
  std::vector<PipelineOp> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(op(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(op(warmup + k, true));
    order.push_back(op(k, false));
  }
  for (int64_t k = std::max<int64_t>(0, total - warmup); k < total; ++k) order.push_back(op(k, false));
  return order;
}

std::vector<int> pipeline_slots(int stage, int stages, int chunks, int64_t micro_batches) {
  std::vector<int> slots(static_cast<size_t>(chunks), 1), held(static_cast<size_t>(chunks), 0);
  for (const PipelineOp& op : pipeline_order(stage, stages, chunks, micro_batches)) {
    int& h = held[static_cast<size_t>(op.chunk)];
    h += op.forward ? 1 : -1;
    slots[static_cast<size_t>(op.chunk)] = std::max(slots[static_cast<size_t>(op.chunk)], h);
  }
  return slots;
}

}  // namespace precon::worker
