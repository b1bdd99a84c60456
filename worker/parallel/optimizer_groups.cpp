#include "worker/parallel/optimizer_groups.h"

#include <algorithm>

#include "kernels/backend.h"
#include "kernels/linalg.h"
#include "worker/parallel/comm_cost.h"

namespace precon::worker {

namespace {

class CommShareGroup final : public ShareGroup {
 public:
  explicit CommShareGroup(Communicator& group) : group_(group) {}
  int index() const override { return group_.rank(); }
  int count() const override { return group_.size(); }

  int64_t share(const float* own, float* all, int64_t n, kernels::DType dtype, kernels::Device device) override {
    const int ranks = group_.size();
    if (dtype != kernels::DType::bf16) {
      group_.all_gather(own, all, n);
      return sent_by_all_gather(n * static_cast<int64_t>(sizeof(float)), ranks);
    }
    // bf16 crosses: every value rounded to bf16 here, all-gathered as bytes, widened into `all`.
    using kernels::Tensor;
    const int64_t total = static_cast<int64_t>(ranks) * n;
    grow(send_, device, n * 2);
    grow(received_, device, total * 2);
    kernels::cast(Tensor::view(send_.data(), {n}, kernels::DType::bf16, device),
                  Tensor::view(const_cast<float*>(own), {n}, kernels::DType::f32, device));
    group_.all_gather_bytes(send_.data(), received_.data(), n * 2);
    kernels::cast(Tensor::view(all, {total}, kernels::DType::f32, device),
                  Tensor::view(received_.data(), {total}, kernels::DType::bf16, device));
    return sent_by_all_gather(n * 2, ranks);
  }

  void sum(float* data, int64_t n) override { group_.all_reduce_sum(data, n); }
  void sum(double* data, int64_t n) override { group_.all_reduce_sum(data, n); }
  void max(int64_t* data, int64_t n) override { group_.all_reduce_max(data, n); }

 private:
  // The bf16 staging buffers, kept between calls (an optimizer shares the same sizes every step).
  static void grow(kernels::Buffer& buf, kernels::Device device, int64_t bytes) {
    if (buf.data() && buf.device() == device && static_cast<int64_t>(buf.bytes()) >= bytes) return;
    buf = kernels::Buffer(device, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  }

  Communicator& group_;
  kernels::Buffer send_, received_;
};

}  // namespace

std::shared_ptr<ShareGroup> share_group(Communicator* group) {
  if (!group) return nullptr;
  return std::make_shared<CommShareGroup>(*group);
}

}  // namespace precon::worker
