#include "worker/parallel/grad_sync.h"

#include <chrono>
#include <stdexcept>

#include "kernels/linalg.h"

namespace precon::worker {

GradientSync::GradientSync(Communicator& dp, const ParamStore& params, int64_t bucket_bytes)
    : dp_(dp), params_(params), bucket_bytes_(bucket_bytes) {
  const float* base = params.all_grads().f32();
  for (size_t i = 0; i < params.size(); ++i) offset_.push_back(params.grad(i).f32() - base);
  offset_.push_back(params.total_numel());
  lo_ = hi_ = params.size();
}

void GradientSync::ready(size_t first, size_t end) {
  if (lo_ == hi_) {
    lo_ = first;
    hi_ = end;
  } else if (end == lo_) {
    lo_ = first;
  } else {
    throw std::logic_error("GradientSync: ready ranges must arrive from the end of the table, adjacent");
  }
  if ((offset_[hi_] - offset_[lo_]) * static_cast<int64_t>(sizeof(float)) >= bucket_bytes_) launch();
  for (auto& p : inflight_) p->poke();
}

void GradientSync::launch() {
  if (lo_ == hi_) return;
  const int64_t n = offset_[hi_] - offset_[lo_];
  inflight_.push_back(dp_.start_all_reduce_sum(params_.all_grads().f32() + offset_[lo_], n));
  bytes_sent_ += n * static_cast<int64_t>(sizeof(float));
  ++buckets_;
  hi_ = lo_;
}

void GradientSync::finish(float scale) {
  launch();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& p : inflight_) p->wait();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  inflight_.clear();
  if (scale != 1.0f) kernels::scale(params_.all_grads(), scale);
  lo_ = hi_ = params_.size();
}

}  // namespace precon::worker
