#include "worker/train/optimizer_files.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "kernels/backend.h"
#include "worker/common/error.h"
#include "worker/common/file_io.h"
#include "worker/common/json_error.h"

namespace precon::worker {

namespace k = kernels;
using nlohmann::json;

namespace {

constexpr const char* kIndex = "optimizer.json";
constexpr const char* kPartsKey = "precon.parts";  // file metadata: {key: {name, global_shape, offset}}

using Shape = std::vector<int64_t>;

Shape shape_of(const k::Tensor& t) { return Shape(t.shape.begin(), t.shape.begin() + t.ndim); }

int64_t volume(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Where a state lies in its tensor: (global shape, offset); a whole tensor at zeros.
struct Box {
  Shape global, offset, shape;
};

Box box_of(const NamedState& s) {
  Box b;
  b.shape = shape_of(s.tensor);
  b.global = s.global_shape.empty() ? b.shape : s.global_shape;
  b.offset = s.global_offset.empty() ? Shape(b.shape.size(), 0) : s.global_offset;
  if (b.global.size() != b.shape.size() || b.offset.size() != b.shape.size())
    throw CheckpointError("optimizer state " + s.name + ": its part " + shape_text(b.shape) + " at " +
                          shape_text(b.offset) + " does not match the global shape " + shape_text(b.global));
  return b;
}

bool whole(const Box& b) {
  return b.shape == b.global && std::all_of(b.offset.begin(), b.offset.end(), [](int64_t o) { return o == 0; });
}

std::string part_key(const std::string& name, const Box& b) {
  if (whole(b)) return name;
  std::string key = name + "@";
  for (size_t d = 0; d < b.offset.size(); ++d) {
    if (d) key += ',';
    key += std::to_string(b.offset[d]);  // appended apart: GCC 12 warns (-Wrestrict) on "," + to_string
  }
  return key;
}

// Host copies of a state view (the device's, or a strided 2-D part: a row at a time) and back.
void to_host(const k::Tensor& t, float* host) {
  if (t.contiguous()) {
    k::copy(k::Tensor::view(host, {t.numel()}), t.reshape({t.numel()}));
    return;
  }
  if (t.ndim != 2 || t.strides[1] != 1) throw CheckpointError("optimizer state view is neither contiguous nor a strided matrix");
  for (int64_t i = 0; i < t.shape[0]; ++i)
    k::copy(k::Tensor::view(host + i * t.shape[1], {t.shape[1]}), t.narrow(0, i, 1).reshape({t.shape[1]}));
}

void from_host(k::Tensor t, const float* host) {
  float* h = const_cast<float*>(host);
  if (t.contiguous()) {
    k::copy(t.reshape({t.numel()}), k::Tensor::view(h, {t.numel()}));
    return;
  }
  if (t.ndim != 2 || t.strides[1] != 1) throw CheckpointError("optimizer state view is neither contiguous nor a strided matrix");
  for (int64_t i = 0; i < t.shape[0]; ++i)
    k::copy(t.narrow(0, i, 1).reshape({t.shape[1]}), k::Tensor::view(h + i * t.shape[1], {t.shape[1]}));
}

// The overlap [lo, hi) of two boxes of one tensor, per dimension; false when they share no value.
bool overlap(const Box& a, const Box& b, Shape& lo, Shape& hi) {
  const size_t n = a.shape.size();
  lo.assign(n, 0);
  hi.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    lo[i] = std::max(a.offset[i], b.offset[i]);
    hi[i] = std::min(a.offset[i] + a.shape[i], b.offset[i] + b.shape[i]);
    if (lo[i] >= hi[i]) return false;
  }
  return true;
}

// Copies the overlap [lo, hi) of two boxes of one tensor (each row-major, contiguous) from src
// into dst; returns the number of values copied.
int64_t copy_overlap(float* dst, const Box& d, const float* src, const Box& s, const Shape& lo, const Shape& hi) {
  const size_t n = d.shape.size();
  if (n == 0) {
    *dst = *src;
    return 1;
  }
  const int64_t run = hi[n - 1] - lo[n - 1];
  Shape at = lo;  // the overlap's current row (its last index stays lo)
  int64_t copied = 0;
  for (;;) {
    int64_t di = 0, si = 0;
    for (size_t i = 0; i < n; ++i) {
      di = di * d.shape[i] + (at[i] - d.offset[i]);
      si = si * s.shape[i] + (at[i] - s.offset[i]);
    }
    std::memcpy(dst + di, src + si, static_cast<size_t>(run) * sizeof(float));
    copied += run;
    int i = static_cast<int>(n) - 2;
    for (; i >= 0; --i) {
      if (++at[static_cast<size_t>(i)] < hi[static_cast<size_t>(i)]) break;
      at[static_cast<size_t>(i)] = lo[static_cast<size_t>(i)];
    }
    if (i < 0) return copied;
  }
}

// An entry of optimizer.json, where it lies.
struct StoredPart {
  std::string file, key;
  Box box;
};

Shape int_list(const json& j, const std::string& what) {
  if (!j.is_array()) throw CheckpointError(what + " is not a list of integers");
  Shape out;
  for (const json& v : j) {
    if (!v.is_number_integer() && !v.is_number_unsigned()) throw CheckpointError(what + " holds " + v.dump() + ", not an integer");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// name -> its stored entries, from optimizer.json, or from a checkpoint of one process written
// before the index existed (optimizer.safetensors alone, whole tensors).
std::map<std::string, std::vector<StoredPart>> read_index(const std::filesystem::path& dir) {
  std::map<std::string, std::vector<StoredPart>> out;
  if (!std::filesystem::exists(dir / kIndex)) {
    SafetensorsFile file = SafetensorsFile::open(dir / "optimizer.safetensors");
    for (const SafetensorsTensor& t : file.tensors())
      out[t.name].push_back({"optimizer.safetensors", t.name, {t.shape, Shape(t.shape.size(), 0), t.shape}});
    return out;
  }
  const std::string where = (dir / kIndex).string();
  json index;
  try {
    std::vector<uint8_t> bytes = read_file(dir / kIndex);
    index = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw CheckpointError(where + ": not a valid optimizer index: " + json_error_text(e));
  }
  const json entries = index.is_object() ? index.value("entries", json()) : json();
  if (!entries.is_array()) throw CheckpointError(where + ": not a valid optimizer index: no \"entries\" list");
  for (const json& e : entries) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("file") || !e["file"].is_string())
      throw CheckpointError(where + ": an entry without a name and a file: " + e.dump());
    const std::string name = e["name"], what = where + ": entry " + name;
    StoredPart p;
    p.file = e["file"];
    p.key = e.contains("key") && e["key"].is_string() ? e["key"].get<std::string>() : name;
    p.box.global = int_list(e.value("global_shape", json()), what + " global_shape");
    p.box.offset = int_list(e.value("offset", json()), what + " offset");
    p.box.shape = int_list(e.value("shape", json()), what + " shape");
    const size_t n = p.box.global.size();
    bool inside = p.box.offset.size() == n && p.box.shape.size() == n;
    for (size_t i = 0; inside && i < n; ++i)
      inside = p.box.offset[i] >= 0 && p.box.shape[i] >= 0 && p.box.offset[i] + p.box.shape[i] <= p.box.global[i];
    if (!inside)
      throw CheckpointError(what + ": its part " + shape_text(p.box.shape) + " at " + shape_text(p.box.offset) +
                            " does not lie inside its global shape " + shape_text(p.box.global));
    out[name].push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::string optimizer_file_name(int rank, int ranks) {
  if (ranks == 1) return "optimizer.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-%05d-of-%05d.safetensors", rank, ranks);
  return buf;
}

OptimizerFile optimizer_file(Optimizer& optimizer) {
  OptimizerFile out;
  std::vector<NamedState> states = optimizer.state_tensors();
  size_t primaries = 0;
  for (const NamedState& s : states) primaries += s.primary;
  out.host.reserve(primaries);  // entries point into these vectors: no reallocation
  json parts = json::object();
  for (const NamedState& s : states) {
    if (!s.primary) continue;
    const k::Tensor& t = s.tensor;
    const Box box = box_of(s);
    const void* data = t.data;
    if (t.device != k::Device::cpu || t.dtype != k::DType::f32 || !t.contiguous()) {
      std::vector<float>& copy = out.host.emplace_back(static_cast<size_t>(t.numel()));
      to_host(t, copy.data());
      data = copy.data();
    }
    const std::string key = part_key(s.name, box);
    if (key != s.name) parts[key] = {{"name", s.name}, {"global_shape", box.global}, {"offset", box.offset}};
    out.entries.push_back({key, SafetensorsDType::F32, box.shape, data});
  }
  out.metadata = {{"producer", "precon"}};
  if (!parts.empty()) out.metadata[kPartsKey] = parts.dump();
  return out;
}

json optimizer_index(const std::vector<FileListing>& files) {
  json entries = json::array();
  for (const FileListing& file : files) {
    json parts = json::object();
    if (auto it = file.metadata.find(kPartsKey); it != file.metadata.end()) parts = json::parse(it->second);
    for (const SafetensorsEntry& e : file.entries) {
      json entry = {{"name", e.name}, {"file", file.file}, {"global_shape", e.shape},
                    {"offset", Shape(e.shape.size(), 0)}, {"shape", e.shape}};
      if (parts.contains(e.name)) {
        const json& p = parts[e.name];
        entry["name"] = p.at("name");
        entry["key"] = e.name;
        entry["global_shape"] = p.at("global_shape");
        entry["offset"] = p.at("offset");
      }
      entries.push_back(std::move(entry));
    }
  }
  return {{"format", 1}, {"entries", entries}};
}

void load_optimizer_files(const std::filesystem::path& dir, Optimizer& optimizer, Communicator* group) {
  const auto index = read_index(dir);
  std::map<std::string, SafetensorsFile> files;
  double held = 0;  // values this rank writes to a checkpoint
  for (const NamedState& s : optimizer.state_tensors()) {
    const Box want = box_of(s);
    if (s.primary) held += static_cast<double>(volume(want.shape));
    auto it = index.find(s.name);
    if (it == index.end()) throw CheckpointError(dir.string() + ": optimizer state " + s.name + " is missing");
    std::vector<float> host(static_cast<size_t>(volume(want.shape)));
    int64_t covered = 0;
    for (const StoredPart& p : it->second) {
      const std::string where = (dir / p.file).string();
      if (p.box.global != want.global)
        throw CheckpointError(where + ": optimizer state " + s.name + " was saved with shape " + shape_text(p.box.global) +
                              ", this optimizer's is " + shape_text(want.global));
      if (!files.count(p.file)) files.emplace(p.file, SafetensorsFile::open(dir / p.file));
      const SafetensorsTensor* t = files.at(p.file).find(p.key);
      if (!t) throw CheckpointError(where + ": optimizer state " + p.key + " is missing");
      if (t->dtype != SafetensorsDType::F32 || t->shape != p.box.shape)
        throw CheckpointError(where + ": optimizer state " + p.key + " is " + safetensors_dtype_name(t->dtype) + " " +
                              shape_text(t->shape) + ", its index entry says F32 " + shape_text(p.box.shape));
      Shape lo, hi;
      if (!overlap(want, p.box, lo, hi)) continue;  // another rank's part: not copied out of the mapping
      // An aligned copy: a tensor's bytes may start at any offset of the file.
      std::vector<float> stored(static_cast<size_t>(t->numel()));
      std::memcpy(stored.data(), t->bytes.data(), stored.size() * sizeof(float));
      covered += copy_overlap(host.data(), want, stored.data(), p.box, lo, hi);
    }
    if (covered != volume(want.shape))
      throw CheckpointError(dir.string() + ": the entries of optimizer state " + s.name + " hold " + std::to_string(covered) +
                            " values for the part " + shape_text(want.shape) + " at " + shape_text(want.offset) +
                            " this rank holds, which has " + std::to_string(volume(want.shape)) +
                            " (parts missing or overlapping)");
    from_host(s.tensor, host.data());
  }
  double saved = 0;
  size_t tensors = 0;
  for (const auto& [name, parts] : index) {
    ++tensors;
    for (const StoredPart& p : parts) saved += static_cast<double>(volume(p.box.shape));
  }
  if (group) group->all_reduce_sum(&held, 1);
  if (held != saved)
    throw CheckpointError(dir.string() + ": holds " + std::to_string(static_cast<int64_t>(saved)) + " optimizer state values in " +
                          std::to_string(tensors) + " tensor(s), this optimizer's ranks write " +
                          std::to_string(static_cast<int64_t>(held)) + ": it belongs to another optimizer");
}

}  // namespace precon::worker
