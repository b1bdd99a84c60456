#include "worker/parallel/counting_communicator.h"

#include "worker/parallel/comm_cost.h"

namespace precon::worker {

void CountingCommunicator::all_reduce_sum(float* data, int64_t n) {
  bytes_ += sent_by_all_reduce(n * 4, size());
  inner_->all_reduce_sum(data, n);
}

void CountingCommunicator::all_reduce_sum(double* data, int64_t n) {
  bytes_ += sent_by_all_reduce(n * 8, size());
  inner_->all_reduce_sum(data, n);
}

void CountingCommunicator::all_reduce_max(int64_t* data, int64_t n) {
  bytes_ += sent_by_all_reduce(n * 8, size());
  inner_->all_reduce_max(data, n);
}

void CountingCommunicator::all_reduce_max(float* data, int64_t n) {
  bytes_ += sent_by_all_reduce(n * 4, size());
  inner_->all_reduce_max(data, n);
}

void CountingCommunicator::all_gather(const float* in, float* out, int64_t n) {
  bytes_ += sent_by_all_gather(n * 4, size());
  inner_->all_gather(in, out, n);
}

void CountingCommunicator::all_gather_bytes(const void* in, void* out, int64_t bytes) {
  bytes_ += sent_by_all_gather(bytes, size());
  inner_->all_gather_bytes(in, out, bytes);
}

void CountingCommunicator::all_to_all_bytes(const void* send, const int64_t* send_bytes, void* recv,
                                            const int64_t* recv_bytes) {
  for (int r = 0; r < size(); ++r)
    if (r != rank()) bytes_ += send_bytes[r];
  inner_->all_to_all_bytes(send, send_bytes, recv, recv_bytes);
}

std::unique_ptr<PendingCollective> CountingCommunicator::start_all_reduce_sum(float* data, int64_t n) {
  bytes_ += sent_by_all_reduce(n * 4, size());
  return inner_->start_all_reduce_sum(data, n);
}

std::unique_ptr<PendingCollective> CountingCommunicator::start_reduce_sum(float* data, int64_t n, int root) {
  bytes_ += sent_by_reduce(n * 4, size(), rank() == root);
  return inner_->start_reduce_sum(data, n, root);
}

void CountingCommunicator::broadcast(void* data, int64_t bytes, int root) {
  if (rank() == root && size() > 1) bytes_ += bytes;  // a tree's root sends it once; the rest forward or keep
  inner_->broadcast(data, bytes, root);
}

std::unique_ptr<PendingCollective> CountingCommunicator::start_send(const float* data, int64_t n, int peer) {
  bytes_ += n * 4;
  return inner_->start_send(data, n, peer);
}

}  // namespace precon::worker
