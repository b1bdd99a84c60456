// The bytes one rank sends in a collective over `ranks` ranks, as the bandwidth-optimal
// algorithms move them: a ring all-reduce sends 2(P−1)/P of the buffer (reduce-scatter, then
// all-gather), a ring all-gather the P−1 other ranks' segments, and a tree reduce sends the
// buffer once from every rank but the root. The comm byte metrics (comm_bytes, optim_comm_bytes)
// count with these, so an all-reduce, a reduce and an all-gather compare on one scale.
#pragma once

#include <cstdint>

namespace precon::worker {

inline int64_t sent_by_all_reduce(int64_t bytes, int ranks) {
  return ranks > 1 ? 2 * static_cast<int64_t>(ranks - 1) * bytes / ranks : 0;
}

inline int64_t sent_by_reduce(int64_t bytes, int ranks, bool root) { return ranks > 1 && !root ? bytes : 0; }

inline int64_t sent_by_all_gather(int64_t segment_bytes, int ranks) {
  return static_cast<int64_t>(ranks - 1) * segment_bytes;
}

}  // namespace precon::worker
