// The NCCL communicator, built into the CUDA backend's plugin (libprecon_cuda.so) when NCCL was
// found: the trainer reaches it through precon_nccl_communicator (nccl_loader.cpp), so only a run
// that asks for NCCL maps it.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "worker/common/error.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

namespace {

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw WorkerError(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(rc));
}

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw WorkerError(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(rc));
}

bool on_device(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on older drivers: clear the error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

class NcclPending final : public PendingCollective {
 public:
  explicit NcclPending(cudaStream_t stream) : stream_(stream) {}
  void wait() override { check_cuda(cudaStreamSynchronize(stream_), "stream synchronize"); }

 private:
  cudaStream_t stream_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {
    // Bucket all-reduces run on a side stream; the compute stream's work before them is awaited
    // through an event.
    check_cuda(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "stream create");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "event create");
    check_cuda(cudaMalloc(&staging_, kStagingBytes), "malloc");
  }
  ~NcclCommunicator() override {
    cudaFree(staging_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(side_);
    ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  void all_reduce_sum(float* data, int64_t n) override { reduce(data, n, ncclFloat32, sizeof(float), ncclSum); }
  void all_reduce_sum(double* data, int64_t n) override { reduce(data, n, ncclFloat64, sizeof(double), ncclSum); }
  void all_reduce_max(int64_t* data, int64_t n) override { reduce(data, n, ncclInt64, sizeof(int64_t), ncclMax); }
  void all_reduce_max(float* data, int64_t n) override { reduce(data, n, ncclFloat32, sizeof(float), ncclMax); }
  void all_gather(const float* in, float* out, int64_t n) override {
    // GPU buffers only: the trainer gathers no host data over NCCL.
    check_nccl(ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat32, comm_, 0), "all-gather");
    check_cuda(cudaStreamSynchronize(0), "stream synchronize");
  }
  void all_gather_bytes(const void* in, void* out, int64_t bytes) override {
    check_nccl(ncclAllGather(in, out, static_cast<size_t>(bytes), ncclUint8, comm_, 0), "all-gather");
    check_cuda(cudaStreamSynchronize(0), "stream synchronize");
  }
  // Grouped sends and receives, one pair a peer (NCCL has no all-to-all of its own).
  void all_to_all_bytes(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) override {
    if (!on_device(send) || !on_device(recv))
      throw WorkerError("NCCL all-to-all: the buffers are host memory; experts on GPUs exchange device tensors");
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    check_nccl(ncclGroupStart(), "group start");
    for (int peer = 0; peer < size(); ++peer) {
      if (send_bytes[peer] > 0)
        check_nccl(ncclSend(s, static_cast<size_t>(send_bytes[peer]), ncclUint8, peer, comm_, 0), "send");
      if (recv_bytes[peer] > 0)
        check_nccl(ncclRecv(r, static_cast<size_t>(recv_bytes[peer]), ncclUint8, peer, comm_, 0), "recv");
      s += send_bytes[peer];
      r += recv_bytes[peer];
    }
    check_nccl(ncclGroupEnd(), "group end");
    check_cuda(cudaStreamSynchronize(0), "stream synchronize");
  }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) override {
    if (!on_device(data)) {
      all_reduce_sum(data, n);
      return std::make_unique<NcclPending>(side_);
    }
    check_cuda(cudaEventRecord(ready_, 0), "event record");
    check_cuda(cudaStreamWaitEvent(side_, ready_, 0), "stream wait");
    check_nccl(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, side_), "all-reduce");
    return std::make_unique<NcclPending>(side_);
  }
  // The bucket all-reduce's twin: on the side stream after the compute stream's work so far; in
  // place on the root, and the other ranks' receive buffer is ignored by NCCL.
  std::unique_ptr<PendingCollective> start_reduce_sum(float* data, int64_t n, int root) override {
    if (!on_device(data)) {
      stage(data, n * static_cast<int64_t>(sizeof(float)), [&](void* d) {
        check_nccl(ncclReduce(d, d, static_cast<size_t>(n), ncclFloat32, ncclSum, root, comm_, 0), "reduce");
      });
      return std::make_unique<NcclPending>(side_);
    }
    check_cuda(cudaEventRecord(ready_, 0), "event record");
    check_cuda(cudaStreamWaitEvent(side_, ready_, 0), "stream wait");
    check_nccl(ncclReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, root, comm_, side_), "reduce");
    return std::make_unique<NcclPending>(side_);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    stage(data, bytes, [&](void* d) { check_nccl(ncclBroadcast(d, d, static_cast<size_t>(bytes), ncclUint8, root, comm_, 0), "broadcast"); });
  }
  // Device buffers only (activations between pipeline stages). Both run on the compute stream,
  // so the send's buffer is read in order with the kernels that wrote it. An ncclSend blocks its
  // stream until the peer posts the matching ncclRecv, so the pipeline schedule's pattern (sends
  // left in flight, a blocking receive next) would stall here: in 1F1B stage 0's second send
  // waits for stage 1's receive, which comes after stage 1's gradient send, which waits for
  // stage 0's receive queued behind that send. Pipelining on CUDA stays refused by the config
  // until the sends in flight are grouped (ncclGroupStart/End) with the next receive.
  std::unique_ptr<PendingCollective> start_send(const float* data, int64_t n, int peer) override {
    if (!on_device(data)) throw WorkerError("NCCL send: the buffer is host memory; pipeline stages on GPUs send device tensors");
    check_nccl(ncclSend(data, static_cast<size_t>(n), ncclFloat32, peer, comm_, 0), "send");
    return std::make_unique<NcclPending>(static_cast<cudaStream_t>(0));
  }
  void recv(float* data, int64_t n, int peer) override {
    if (!on_device(data)) throw WorkerError("NCCL recv: the buffer is host memory; pipeline stages on GPUs receive device tensors");
    check_nccl(ncclRecv(data, static_cast<size_t>(n), ncclFloat32, peer, comm_, 0), "recv");
    check_cuda(cudaStreamSynchronize(0), "stream synchronize");
  }
  void barrier() override {
    int64_t token = 0;
    all_reduce_max(&token, 1);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t sub;
    check_nccl(ncclCommSplit(comm_, color, key, &sub, nullptr), "comm split");
    int r = 0, n = 1;
    check_nccl(ncclCommUserRank(sub, &r), "comm user rank");
    check_nccl(ncclCommCount(sub, &n), "comm count");
    return std::make_unique<NcclCommunicator>(sub, r, n);
  }

 private:
  static constexpr int64_t kStagingBytes = 1 << 16;

  template <class F>
  void stage(void* data, int64_t bytes, F&& op) {
    if (on_device(data)) {
      op(data);
      check_cuda(cudaStreamSynchronize(0), "stream synchronize");
      return;
    }
    if (bytes > kStagingBytes) throw WorkerError("NCCL: a host buffer of " + std::to_string(bytes) + " bytes is too large to stage");
    check_cuda(cudaMemcpy(staging_, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "memcpy");
    op(staging_);
    check_cuda(cudaStreamSynchronize(0), "stream synchronize");
    check_cuda(cudaMemcpy(data, staging_, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), "memcpy");
  }
  void reduce(void* data, int64_t n, ncclDataType_t type, size_t elem, ncclRedOp_t op) {
    stage(data, n * static_cast<int64_t>(elem), [&](void* d) {
      check_nccl(ncclAllReduce(d, d, static_cast<size_t>(n), type, op, comm_, 0), "all-reduce");
    });
  }

  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* staging_ = nullptr;
};

}  // namespace

}  // namespace precon::worker

// One NCCL communicator over the ranks of `bootstrap` (a collective on it), on the current GPU.
// The caller owns the result; it stays valid while the plugin is loaded (for the process).
extern "C" __attribute__((visibility("default"))) precon::worker::Communicator* precon_nccl_communicator(
    precon::worker::Communicator* bootstrap) {
  using namespace precon::worker;
  ncclUniqueId id{};
  if (bootstrap->rank() == 0) check_nccl(ncclGetUniqueId(&id), "get unique id");
  bootstrap->broadcast(&id, sizeof id, 0);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, bootstrap->size(), id, bootstrap->rank()), "comm init");
  return new NcclCommunicator(comm, bootstrap->rank(), bootstrap->size());
}
