#include "worker/optim/ns_batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace precon::worker::optim {

using kernels::Tensor;

void NsBatches::add(size_t id, int64_t rows, int64_t cols) { added_.push_back({id, {rows, cols}}); }

void NsBatches::allocate(kernels::Device device) {
  device_ = device;
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_shape;
  for (const auto& [id, shape] : added_) by_shape[shape].push_back(id);
  size_t floats = 0;
  for (const auto& [shape, ids] : by_shape) {
    const int64_t size = std::max<int64_t>(1, shape.first * shape.second);
    const int64_t capacity =
        std::min({kMaxNsBatch, static_cast<int64_t>(ids.size()), kNsBatchFloats / size});
    if (capacity < 2) continue;
    Group g;
    g.rows = shape.first;
    g.cols = shape.second;
    g.ids = ids;
    g.offset = floats;
    g.capacity = capacity;
    floats += static_cast<size_t>(capacity * size);
    for (size_t k = 0; k < ids.size(); ++k) where_[ids[k]] = {groups_.size(), k};
    groups_.push_back(std::move(g));
  }
  if (floats > 0) buffer_ = kernels::Buffer(device, floats * sizeof(float));
}

void NsBatches::begin_step() {
  for (Group& g : groups_) g.pending = 0;
}

Tensor NsBatches::slot(size_t id) const {
  const auto [group, index] = where_.at(id);
  const Group& g = groups_[group];
  const size_t in_batch = index % static_cast<size_t>(g.capacity);
  return buffer_.view({g.rows, g.cols}, kernels::DType::f32,
                      (g.offset + in_batch * static_cast<size_t>(g.rows * g.cols)) * sizeof(float));
}

void NsBatches::filled(size_t id, const kernels::NsOptions& options, const Done& done) {
  const auto [group, index] = where_.at(id);
  Group& g = groups_[group];
  if (index % static_cast<size_t>(g.capacity) != static_cast<size_t>(g.pending))
    throw std::logic_error("NsBatches: problem " + std::to_string(id) + " filled out of its registered order");
  ++g.pending;
  if (g.pending < g.capacity && index + 1 < g.ids.size()) return;
  const int64_t n = g.pending;
  Tensor batch = buffer_.view({n, g.rows, g.cols}, kernels::DType::f32, g.offset * sizeof(float));
  kernels::newton_schulz(batch, batch, options);
  const size_t first = index + 1 - static_cast<size_t>(n);
  for (int64_t k = 0; k < n; ++k) done(g.ids[first + static_cast<size_t>(k)], batch.select(k));
  g.pending = 0;
}

std::pair<size_t, size_t> NsBatches::counts() const { return {where_.size(), groups_.size()}; }

}  // namespace precon::worker::optim
