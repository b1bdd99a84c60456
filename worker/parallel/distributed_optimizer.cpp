#include "worker/parallel/distributed_optimizer.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>

#include "kernels/backend.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/grad_assembly.h"
#include "worker/parallel/layout.h"

namespace precon::worker {

namespace {

// Adds the wall-clock seconds of its lifetime to `sink`, synchronising a CUDA device at both ends
// so that queued kernels are charged where they were queued.
class Seconds {
 public:
  Seconds(double& sink, kernels::Device device) : sink_(sink), device_(device) {
    if (device_ == kernels::Device::cuda) kernels::synchronize(device_);
    start_ = std::chrono::steady_clock::now();
  }
  ~Seconds() {
    try {
      if (device_ == kernels::Device::cuda) kernels::synchronize(device_);
    } catch (...) {
    }
    sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Seconds(const Seconds&) = delete;
  Seconds& operator=(const Seconds&) = delete;

 private:
  double& sink_;
  kernels::Device device_;
  std::chrono::steady_clock::time_point start_;
};

// The owners of a step's units over a group, and each rank's results in its segment: the parts
// of the units it computes back to back in unit order. One all-gather per chunk hands the
// segments to every rank (the largest rank's segment sizes them all).
class GroupResults final : public OwnedResults {
 public:
  GroupResults(std::shared_ptr<ShareGroup> group, int tensor, std::shared_ptr<ShareGroup> tp,
               const std::vector<OwnedUnit>& units, kernels::DType dtype, int64_t chunk, kernels::Device device)
      : group_(std::move(group)), tensor_(tensor), device_(device), wholes_(std::move(tp), device) {
    const int ranks = group_->count(), me = group_->index();
    std::vector<double> costs;
    for (const OwnedUnit& u : units) costs.push_back(u.cost);
    const std::vector<int> by_rank = assign_owners(costs, ranks), by_replica = assign_owners(costs, ranks / tensor_);
    std::vector<int64_t> filled(static_cast<size_t>(ranks), 0);
    for (size_t i = 0; i < units.size(); ++i) {
      const OwnedUnit& u = units[i];
      Unit w;
      if (u.parts.size() == 1) {
        w.owner = by_rank[i];
        w.root = member_data_index(w.owner, tensor_);
        w.holds = me == w.owner;
        w.first_slot = slots_.size();
        slots_.push_back({i, 0, w.owner, 0, u.parts[0]});
      } else {
        if (static_cast<int>(u.parts.size()) != tensor_) {
          throw OptimizerError("owner_planner: a unit in " + std::to_string(u.parts.size()) +
                                      " parts, not one or " + std::to_string(tensor_));
        }
        w.owner = -1;
        w.root = by_replica[i];
        w.holds = member_data_index(me, tensor_) == w.root;
        w.part = static_cast<size_t>(member_tensor_rank(me, tensor_));
        w.first_slot = slots_.size();
        for (size_t r = 0; r < u.parts.size(); ++r)
          slots_.push_back({i, r, group_member(w.root, static_cast<int>(r), tensor_), 0, u.parts[r]});
      }
      w.parts = u.parts.size();
      units_.push_back(w);
    }
    for (Slot& s : slots_) {
      s.offset = filled[static_cast<size_t>(s.rank)];
      filled[static_cast<size_t>(s.rank)] += s.numel;
    }
    segment_ = std::max<int64_t>(1, *std::max_element(filled.begin(), filled.end()));
    chunk_ = ranks > 1 && chunk > 0 ? std::min(segment_, chunk) : segment_;
    dtype_ = ranks > 1 ? dtype : kernels::DType::f32;
    segment_buf_ = kernels::Buffer(device, static_cast<size_t>(segment_) * sizeof(float));
    if (ranks > 1) gathered_ = kernels::Buffer(device, static_cast<size_t>(ranks * chunk_) * sizeof(float));
  }

  bool mine(size_t unit) const override { return units_[unit].holds; }
  size_t part(size_t unit) const override { return units_[unit].part; }
  bool holds(size_t unit) const override { return units_[unit].holds; }
  bool ours(size_t unit) const override { return units_[unit].root == member_data_index(group_->index(), tensor_); }
  bool applies(size_t unit, size_t part) const override {
    return units_[unit].parts == 1 || static_cast<int>(part) == member_tensor_rank(group_->index(), tensor_);
  }
  int root(size_t unit) const override { return units_[unit].root; }
  int owner(size_t unit) const override { return units_[unit].owner; }
  float* own(size_t unit) override {
    const Unit& w = units_[unit];
    return static_cast<float*>(segment_buf_.data()) + slots_[w.first_slot + w.part].offset;
  }

  void share(const Arrived& arrived, double& gather_seconds, double& apply_seconds) override {
    const int ranks = group_->count();
    for (int64_t at = 0; at < segment_; at += chunk_) {
      const int64_t n = std::min(chunk_, segment_ - at);
      float* own = static_cast<float*>(segment_buf_.data()) + at;
      const float* all = own;  // one rank: its own segment is everything (no copy)
      if (ranks > 1) {
        Seconds timer(gather_seconds, device_);
        comm_bytes_ += group_->share(own, static_cast<float*>(gathered_.data()), n, dtype_, device_);
        all = static_cast<float*>(gathered_.data());
      }
      Seconds timer(apply_seconds, device_);
      for (const Slot& s : slots_) {
        const int64_t from = std::max(at, s.offset), to = std::min(at + n, s.offset + s.numel);
        if (from >= to) continue;
        arrived(s.unit, s.part, from - s.offset, to - from, all + s.rank * n + (from - at));
      }
    }
  }

  void max(int64_t* flags, int64_t n) override { group_->max(flags, n); }
  kernels::Tensor whole_gradient(const OptimParam& p) override { return wholes_.gather(p); }
  int64_t comm_bytes() const override { return comm_bytes_ + wholes_.comm_bytes(); }
  bool primary() const override { return member_data_index(group_->index(), tensor_) == 0; }
  bool distributed() const override { return group_->count() > 1; }
  std::string who() const override { return "rank " + std::to_string(group_->index()); }

 private:
  struct Unit {
    int owner = 0;     // the group rank of a unit of one part; -1 for one in parts
    int root = 0;      // the data index that computes it
    bool holds = false;
    size_t part = 0;   // this rank's part of a unit in parts
    size_t parts = 1;
    size_t first_slot = 0;
  };
  // One part of one unit's result in its rank's segment.
  struct Slot {
    size_t unit = 0, part = 0;
    int rank = 0;
    int64_t offset = 0, numel = 0;
  };

  std::shared_ptr<ShareGroup> group_;
  int tensor_ = 1;
  kernels::Device device_;
  kernels::DType dtype_ = kernels::DType::f32;
  std::vector<Unit> units_;
  std::vector<Slot> slots_;  // in unit order, then part order
  int64_t segment_ = 1, chunk_ = 1;
  kernels::Buffer segment_buf_, gathered_;
  int64_t comm_bytes_ = 0;
  WholeGradients wholes_;  // split matrices' whole gradients for their owners
};

// Megatron's distributed optimizer's ranges: rank r updates values [r·per, (r + 1)·per) of the
// total (the last range may be short or empty), and one all-gather per chunk of per hands them on.
class GroupRanges final : public OwnedRanges {
 public:
  GroupRanges(std::shared_ptr<ShareGroup> group, int64_t total, kernels::Device device)
      : group_(std::move(group)), device_(device), total_(total) {
    const int64_t ranks = group_->count(), rank = group_->index();
    per_rank_ = (total_ + ranks - 1) / ranks;
    lo_ = std::min(total_, rank * per_rank_);
    hi_ = std::min(total_, lo_ + per_rank_);
    // The all-gather runs in chunks so that its buffers stay small beside the state it divides.
    chunk_ = std::max<int64_t>(1, std::min<int64_t>(per_rank_, kGatherChunk));
    send_ = kernels::Buffer(device, static_cast<size_t>(chunk_) * sizeof(float));
    recv_ = kernels::Buffer(device, static_cast<size_t>(chunk_ * ranks) * sizeof(float));
  }
  int64_t lo() const override { return lo_; }
  int64_t hi() const override { return hi_; }
  int root(int64_t first, int64_t n) const override {
    if (per_rank_ == 0 || n <= 0 || first / per_rank_ != (first + n - 1) / per_rank_) return -1;
    return static_cast<int>(first / per_rank_);
  }
  void share(const Copy& copy) override {
    const int64_t ranks = group_->count();
    float* send = static_cast<float*>(send_.data());
    float* recv = static_cast<float*>(recv_.data());
    for (int64_t c = 0; c < per_rank_; c += chunk_) {
      const int64_t n = std::min(chunk_, per_rank_ - c);
      // This rank's values [lo_ + c, lo_ + c + n); past the end of the whole (the last range) unused.
      copy(lo_ + c, std::min(hi_, lo_ + c + n), send, true);
      comm_bytes_ += group_->share(send, recv, n, kernels::DType::f32, device_);
      for (int64_t q = 0; q < ranks; ++q) {
        if (q == group_->index()) continue;
        const int64_t from = q * per_rank_ + c;
        copy(std::min(total_, from), std::min(total_, from + n), recv + q * n, false);
      }
    }
  }
  int64_t comm_bytes() const override { return comm_bytes_; }

 private:
  std::shared_ptr<ShareGroup> group_;
  kernels::Device device_;
  int64_t total_ = 0, per_rank_ = 0, lo_ = 0, hi_ = 0, chunk_ = 1;
  kernels::Buffer send_, recv_;
  int64_t comm_bytes_ = 0;
};

}  // namespace

std::vector<int> assign_owners(const std::vector<double>& cost, int ranks) {
  std::vector<size_t> order(cost.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Largest first; equal costs keep table order, so the result does not depend on the sort.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<size_t>(std::max(ranks, 1)), 0.0);
  std::vector<int> owner(cost.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    owner[i] = static_cast<int>(least - load.begin());
    *least += cost[i];
  }
  return owner;
}

OwnerPlanner owner_planner(std::shared_ptr<ShareGroup> group, int tensor, std::shared_ptr<ShareGroup> tp) {
  if (!group) return nullptr;
  tensor = std::max(1, tensor);
  if (group->count() % tensor != 0 ||
      (tensor > 1 && (!tp || tp->count() != tensor || tp->index() != member_tensor_rank(group->index(), tensor)))) {
    throw OptimizerError("the tensor-parallel group does not match group rank = data index · " +
                         std::to_string(tensor) + " + tensor rank");
  }
  if (tensor == 1) tp = nullptr;
  return [group = std::move(group), tensor, tp = std::move(tp)](const std::vector<OwnedUnit>& units,
                                                                kernels::DType dtype, int64_t chunk,
                                                                kernels::Device device) -> std::unique_ptr<OwnedResults> {
    return std::make_unique<GroupResults>(group, tensor, tp, units, dtype, chunk, device);
  };
}

OwnerPlanner owner_planner(std::shared_ptr<ShareGroup> group, int tensor, ShareGroup* tp) {
  // Not owned: the caller keeps tp alive (the aliasing constructor shares no ownership).
  return owner_planner(std::move(group), tensor, std::shared_ptr<ShareGroup>(std::shared_ptr<ShareGroup>(), tp));
}

RangePlanner range_planner(std::shared_ptr<ShareGroup> replicas) {
  if (!replicas || replicas->count() <= 1) return nullptr;
  return [replicas = std::move(replicas)](int64_t total, kernels::Device device) -> std::unique_ptr<OwnedRanges> {
    return std::make_unique<GroupRanges>(replicas, total, device);
  };
}

}  // namespace precon::worker
