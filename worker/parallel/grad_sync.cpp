#include "worker/parallel/grad_sync.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/backend.h"
#include "kernels/linalg.h"
#include "worker/parallel/comm_cost.h"

namespace precon::worker {

GradientSync::GradientSync(Communicator& dp, const ParamStore& params, std::vector<int> roots, int64_t bucket_bytes,
                           std::vector<bool> rows)
    : dp_(dp), params_(params), roots_(std::move(roots)), bucket_bytes_(bucket_bytes), rows_(std::move(rows)) {
  if (!rows_.empty() && rows_.size() != params.size())
    throw std::logic_error("GradientSync: a row selection of " + std::to_string(rows_.size()) + " for " +
                           std::to_string(params.size()) + " parameters");
  if (!roots_.empty() && roots_.size() != params.size())
    throw std::logic_error("GradientSync: " + std::to_string(roots_.size()) + " roots for " +
                           std::to_string(params.size()) + " parameters");
  for (int r : roots_) {
    if (r >= dp.size()) throw std::logic_error("GradientSync: root " + std::to_string(r) + " outside the group");
  }
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

// One collective per maximal run of the bucket's own rows with the same root: the bucket's memory
// is contiguous, so each run is too.
void GradientSync::launch() {
  if (lo_ == hi_) return;
  // A backend may complete a collective before it returns (mpi's reduce): that is waiting too.
  const auto t0 = std::chrono::steady_clock::now();
  float* base = params_.all_grads().f32();
  for (size_t i = lo_; i < hi_;) {
    if (!mine(i)) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < hi_ && mine(j) && root(j) == root(i)) ++j;
    const int64_t n = offset_[j] - offset_[i];
    const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
    const int r = root(i);
    if (n == 0) {  // rows of other pipeline stages: no memory here, nothing to send
    } else if (r < 0) {
      inflight_.push_back(dp_.start_all_reduce_sum(base + offset_[i], n));
      bytes_sent_ += sent_by_all_reduce(bytes, dp_.size());
    } else {
      inflight_.push_back(dp_.start_reduce_sum(base + offset_[i], n, r));
      bytes_sent_ += sent_by_reduce(bytes, dp_.size(), r == dp_.rank());
      if (r != dp_.rank()) foreign_.emplace_back(offset_[i], n);
    }
    i = j;
  }
  ++buckets_;
  hi_ = lo_;
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradientSync::finish(float scale) {
  launch();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& p : inflight_) p->wait();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  inflight_.clear();
  const kernels::Tensor all = params_.all_grads();
  for (const auto& [offset, n] : foreign_)
    kernels::fill_zero(kernels::Tensor::view(all.f32() + offset, {n}, kernels::DType::f32, all.device));
  foreign_.clear();
  if (scale != 1.0f && rows_.empty()) {
    kernels::scale(all, scale);
  } else if (scale != 1.0f) {
    for (size_t i = 0; i < params_.size();) {
      size_t j = i;
      while (j < params_.size() && mine(j)) ++j;
      if (j > i && offset_[j] > offset_[i])
        kernels::scale(kernels::Tensor::view(all.f32() + offset_[i], {offset_[j] - offset_[i]}, kernels::DType::f32,
                                             all.device),
                       scale);
      i = j + 1;
    }
  }
  lo_ = hi_ = params_.size();
}

double GradientSync::norm(Communicator* tp) { return std::sqrt(norm_squared(tp)); }

double GradientSync::norm_squared(Communicator* tp) {
  const bool parts = tp && tp->size() > 1;
  double shared = 0, own = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!mine(i)) continue;
    if (parts && !params_.split(i) && tp->rank() != 0) continue;  // a replicated row counts once
    const int r = root(i);
    if (r < 0) shared += kernels::sum_squares(params_.grad(i));
    else if (r == dp_.rank()) own += kernels::sum_squares(params_.grad(i));
  }
  double total = shared;
  if (reduced_tensors() > 0) {
    // The all-reduced part is the same on every rank: the first adds it, so it counts once.
    total = own + (dp_.rank() == 0 ? shared : 0.0);
    dp_.all_reduce_sum(&total, 1);
  }
  if (parts) tp->all_reduce_sum(&total, 1);
  return total;
}

int GradientSync::reduced_tensors() const {
  int n = 0;
  for (int r : roots_) n += r >= 0;
  return n;
}

}  // namespace precon::worker
