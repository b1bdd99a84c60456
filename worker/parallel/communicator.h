// A group of ranks and the collectives the trainer needs, with backends `local` (one process:
// every collective is the identity), `mpi` (OpenMPI: CPU collectives and the bootstrap for NCCL)
// and `nccl` (GPU tensors). Groups for tensor, data, pipeline and expert parallelism are split from
// the world; point-to-point messages carry activations between pipeline stages.
// Thread-compatible: one thread issues a communicator's calls (the training thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace precon::worker {

// A non-blocking collective in flight; wait() returns once its buffer holds the result.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
  // Lets the collective advance without blocking (MPI progresses inside MPI calls only).
  virtual void poke() {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;

  // In place over `n` elements of host memory (device memory for nccl).
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_max(int64_t* data, int64_t n) = 0;
  virtual void all_reduce_max(float* data, int64_t n) = 0;
  // out (size() · n elements) = every rank's `in` (n elements), in rank order.
  virtual void all_gather(const float* in, float* out, int64_t n) = 0;
  // The same over raw bytes (bf16 payloads): out (size() · bytes) = every rank's `in`, in rank order.
  virtual void all_gather_bytes(const void* in, void* out, int64_t bytes) = 0;
  // Every rank sends send_bytes[r] bytes to each rank r, from `send` in rank order (block r right
  // after block r − 1), and receives recv_bytes[r] bytes from each rank r into `recv`, in rank
  // order: MPI's Alltoallv over contiguous blocks (the mixture of experts's token dispatch). Both
  // count arrays hold size() entries and must match their peers' (rank r's send_bytes[me] = my
  // recv_bytes[r]).
  virtual void all_to_all_bytes(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) = 0;
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) = 0;
  // The sum over the group into `root`'s `data` only: the other ranks send theirs and keep it as
  // it was (half an all-reduce's bytes, for a result that one rank alone needs). A backend may
  // complete it before returning (mpi does: measured faster on the CPU than one left in flight).
  virtual std::unique_ptr<PendingCollective> start_reduce_sum(float* data, int64_t n, int root) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Point-to-point: `n` floats to / from rank `peer` of this group, matched in the order they
  // were posted. start_send returns at once and the buffer must stay untouched until the returned
  // wait(); recv blocks until the message is in `data`.
  virtual std::unique_ptr<PendingCollective> start_send(const float* data, int64_t n, int peer) = 0;
  virtual void recv(float* data, int64_t n, int peer) = 0;
  virtual void barrier() = 0;
  // The ranks with the same `color`, ordered by `key`: one call on every rank of this group.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// One process: rank 0 of 1.
std::unique_ptr<Communicator> make_local_communicator();

// Whether this build has an MPI backend (OpenMPI found at configure time).
bool mpi_available();

}  // namespace precon::worker
