// A communicator that forwards every call to the one it wraps and counts the bytes this rank sends
// through it, as comm_cost.h's bandwidth-optimal algorithms send them: the per-group byte metrics
// (comm_bytes_tp, comm_bytes_dp, comm_bytes_pp, comm_bytes_ep) read one each. Not thread-safe
// beyond the wrapped communicator's own rules (a group is used by one thread at a time).
#pragma once

#include <cstdint>
#include <memory>

#include "worker/parallel/communicator.h"

namespace precon::worker {

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  // Bytes this rank sent since construction.
  int64_t bytes_sent() const { return bytes_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* backend() const override { return inner_->backend(); }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_reduce_sum(double* data, int64_t n) override;
  void all_reduce_max(int64_t* data, int64_t n) override;
  void all_reduce_max(float* data, int64_t n) override;
  void all_gather(const float* in, float* out, int64_t n) override;
  void all_gather_bytes(const void* in, void* out, int64_t bytes) override;
  void all_to_all_bytes(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) override;
  std::unique_ptr<PendingCollective> start_reduce_sum(float* data, int64_t n, int root) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  std::unique_ptr<PendingCollective> start_send(const float* data, int64_t n, int peer) override;
  void recv(float* data, int64_t n, int peer) override { inner_->recv(data, n, peer); }
  void barrier() override { inner_->barrier(); }
  // The wrapped communicator's split, not counted: wrap it again to count it.
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_->split(color, key); }

 private:
  std::unique_ptr<Communicator> inner_;
  int64_t bytes_ = 0;
};

}  // namespace precon::worker
