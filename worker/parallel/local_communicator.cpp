// The one-process backend: rank 0 of 1, every collective leaves its buffer as it is.
#include "worker/parallel/communicator.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace precon::worker {

namespace {

class Done final : public PendingCollective {
 public:
  void wait() override {}
};

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(int64_t*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float* in, float* out, int64_t n) override { std::copy(in, in + n, out); }
  void all_gather_bytes(const void* in, void* out, int64_t bytes) override {
    std::memcpy(out, in, static_cast<size_t>(bytes));
  }
  void all_to_all_bytes(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) override {
    if (send_bytes[0] != recv_bytes[0]) throw std::logic_error("all-to-all in a group of one: sends and receives differ");
    if (send_bytes[0] > 0) std::memcpy(recv, send, static_cast<size_t>(send_bytes[0]));
  }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(float*, int64_t) override { return std::make_unique<Done>(); }
  std::unique_ptr<PendingCollective> start_reduce_sum(float*, int64_t, int) override { return std::make_unique<Done>(); }
  void broadcast(void*, int64_t, int) override {}
  std::unique_ptr<PendingCollective> start_send(const float*, int64_t, int) override { no_peer(); }
  void recv(float*, int64_t, int) override { no_peer(); }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalCommunicator>(); }

 private:
  // A group of one has no other rank to talk to: a caller that sends here has a wrong layout.
  [[noreturn]] static void no_peer() { throw std::logic_error("point-to-point message in a group of one rank"); }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace precon::worker
