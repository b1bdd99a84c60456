#include "worker/ckpt/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/json_error.h"

namespace precon::worker {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

// Passes bytes on and counts them: a produced tensor must write exactly its size.
struct CountingSink : ByteSink {
  explicit CountingSink(ByteSink& out) : out(out) {}
  void write(const void* data, size_t n) override {
    out.write(data, n);
    bytes += n;
  }
  using ByteSink::write;
  ByteSink& out;
  uint64_t bytes = 0;
};

struct DTypeInfo {
  SafetensorsDType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::BOOL, "BOOL", 1}, {SafetensorsDType::U8, "U8", 1},     {SafetensorsDType::I8, "I8", 1},
    {SafetensorsDType::F8_E5M2, "F8_E5M2", 1}, {SafetensorsDType::F8_E4M3, "F8_E4M3", 1},
    {SafetensorsDType::I16, "I16", 2},   {SafetensorsDType::U16, "U16", 2},   {SafetensorsDType::F16, "F16", 2},
    {SafetensorsDType::BF16, "BF16", 2}, {SafetensorsDType::I32, "I32", 4},   {SafetensorsDType::U32, "U32", 4},
    {SafetensorsDType::F32, "F32", 4},   {SafetensorsDType::F64, "F64", 8},   {SafetensorsDType::I64, "I64", 8},
    {SafetensorsDType::U64, "U64", 8}};

// IEEE binary16 bits -> fp32, exactly (subnormals, infinities and NaN payloads included).
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000 | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while (!(mant & 0x400)) mant <<= 1, ++shift;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mant & 0x3FF) << 13);
  }
  return std::bit_cast<float>(bits);
}

const DTypeInfo& info(SafetensorsDType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i;
  throw SafetensorsError("unknown safetensors dtype");
}

// Hugging Face's reader refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

// numel * element size, or nullopt on overflow / negative dims.
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, size_t elem) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDType dtype) { return info(dtype).name; }
size_t safetensors_dtype_size(SafetensorsDType dtype) { return info(dtype).size; }

std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeInfo& i : kDTypes)
    if (name == i.name) return i.dtype;
  return std::nullopt;
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void safetensors_to_f32(const SafetensorsTensor& t, std::span<float> out) {
  if (out.size() != static_cast<size_t>(t.numel())) {
    throw SafetensorsError("tensor \"" + t.name + "\": " + std::to_string(t.numel()) + " values, room for " +
                           std::to_string(out.size()));
  }
  const std::byte* src = t.bytes.data();
  switch (t.dtype) {
    case SafetensorsDType::F32:
      if (!out.empty()) std::memcpy(out.data(), src, out.size() * sizeof(float));
      return;
    case SafetensorsDType::F16:
    case SafetensorsDType::BF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);  // the data may be unaligned
        out[i] = t.dtype == SafetensorsDType::F16 ? f16_to_f32(h) : std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
      }
      return;
    default:
      throw SafetensorsError("tensor \"" + t.name + "\" has dtype " + info(t.dtype).name +
                             "; precon reads floating-point weights as F32, F16 or BF16: convert the file first "
                             "(e.g. in PyTorch, tensor.float() before safetensors' save_file)");
  }
}

void write_safetensors(ByteSink& out, std::span<const SafetensorsEntry> entries,
                       const SafetensorsMetadata& metadata) {
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return info(entries[a].dtype).size > info(entries[b].dtype).size;
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::vector<uint64_t> sizes(entries.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    const SafetensorsEntry& e = entries[i];
    if (e.name.empty() || e.name == kMetadataKey || header.contains(e.name)) {
      throw SafetensorsError("safetensors writer: tensor name \"" + e.name + "\" is empty, reserved or repeated");
    }
    std::optional<uint64_t> n = byte_size(e.shape, info(e.dtype).size);
    if (!n) throw SafetensorsError("safetensors writer: tensor \"" + e.name + "\" has a negative or huge shape");
    if (*n > 0 && e.data == nullptr && !e.produce)
      throw SafetensorsError("safetensors writer: tensor \"" + e.name + "\" has no data");
    sizes[i] = *n;
    header[e.name] = {{"dtype", info(e.dtype).name}, {"shape", e.shape}, {"data_offsets", {offset, offset + *n}}};
    offset += *n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t len = text.size();
  out.write(&len, sizeof len);
  out.write(text);
  for (size_t i : order) {
    if (entries[i].data != nullptr || sizes[i] == 0) {
      out.write(entries[i].data, sizes[i]);
      continue;
    }
    CountingSink counted(out);
    entries[i].produce(counted);
    if (counted.bytes != sizes[i])
      throw SafetensorsError("safetensors writer: tensor \"" + entries[i].name + "\" produced " +
                             std::to_string(counted.bytes) + " bytes, not " + std::to_string(sizes[i]));
  }
}

std::vector<uint8_t> safetensors_bytes(std::span<const SafetensorsEntry> entries,
                                       const SafetensorsMetadata& metadata) {
  VectorSink sink;
  write_safetensors(sink, entries, metadata);
  return std::move(sink.bytes());
}

void write_safetensors(const fs::path& path, std::span<const SafetensorsEntry> entries,
                       const SafetensorsMetadata& metadata) {
  // Streamed: a rank's optimizer shard is not copied in memory on its way to the file.
  write_file_atomic(path, [&](ByteSink& out) { write_safetensors(out, entries, metadata); });
}

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile f;
  f.source_ = path.string();
  f.mapping_ = std::make_shared<MappedFile>(path);
  f.parse_header(f.mapping_->bytes());
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, const std::string& source) {
  SafetensorsFile f;
  f.source_ = source;
  f.buffer_ = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  f.parse_header(std::as_bytes(std::span(*f.buffer_)));
  return f;
}

void SafetensorsFile::parse_header(std::span<const std::byte> all) {
  auto fail = [&](const std::string& what) -> SafetensorsError {
    return SafetensorsError("safetensors file " + source_ + ": " + what);
  };
  if (all.size() < 8) throw fail("only " + std::to_string(all.size()) + " bytes, not even a header length");
  uint64_t len;
  std::memcpy(&len, all.data(), 8);
  // The length is not quoted: for a file that is not a safetensors file it is the file's first 8
  // bytes (and a recipe can name any file the trainer can read).
  if (len > kMaxHeaderBytes || len > all.size() - 8) {
    throw fail("not a safetensors file (or a truncated one): its header length does not fit the file (" +
               std::to_string(all.size()) + " bytes)");
  }
  const char* text = reinterpret_cast<const char*>(all.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + len);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw fail("not a safetensors file: its header is not valid JSON (" + json_error_text(e) + ")");
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  const uint64_t data_size = all.size() - 8 - len;
  const std::byte* data = all.data() + 8 + len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == kMetadataKey) {
      if (!v.is_object()) throw fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw fail("__metadata__ value for \"" + m.key() + "\" is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return fail("tensor \"" + name + "\": " + what); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      throw bad("entry needs dtype, shape and data_offsets");
    }
    const nlohmann::json& jd = v["dtype"];
    std::optional<SafetensorsDType> dtype = jd.is_string() ? parse_safetensors_dtype(jd.get<std::string>()) : std::nullopt;
    if (!dtype) {
      std::string known;
      for (const DTypeInfo& i : kDTypes) known += (known.empty() ? "" : ", ") + std::string(i.name);
      throw bad("dtype " + jd.dump() + " is not a safetensors dtype (" + known + ")");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = *dtype;
    if (!v["shape"].is_array()) throw bad("shape is not an array");
    for (const nlohmann::json& d : v["shape"]) {
      if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0)) {
        throw bad("shape " + v["shape"].dump() + " has a non-integer or negative dimension");
      }
      t.shape.push_back(d.get<int64_t>());
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw bad("data_offsets " + off.dump() + " is not [begin, end]");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      throw bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                "] fall outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    }
    std::optional<uint64_t> want = byte_size(t.shape, info(t.dtype).size);
    if (!want || *want != end - begin) {
      throw bad(std::string(info(t.dtype).name) + " shape " + v["shape"].dump() + " needs " +
                (want ? std::to_string(*want) : std::string("too many")) + " bytes but data_offsets span " +
                std::to_string(end - begin));
    }
    t.bytes = std::span<const std::byte>(data + begin, end - begin);
    tensors_.push_back(std::move(t));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.bytes.data() < b.bytes.data() || (a.bytes.data() == b.bytes.data() && a.bytes.size() < b.bytes.size());
  });
  uint64_t expected = 0;
  for (const SafetensorsTensor& t : tensors_) {
    const uint64_t begin = static_cast<uint64_t>(t.bytes.data() - data);
    if (begin != expected) {
      throw fail("tensor \"" + t.name + "\" starts at byte " + std::to_string(begin) + " of the data section, expected " +
                 std::to_string(expected) + (begin < expected ? " (overlaps the previous tensor)" : " (gap)"));
    }
    expected = begin + t.bytes.size();
  }
  if (expected != data_size) {
    throw fail("tensors cover " + std::to_string(expected) + " of the " + std::to_string(data_size) +
               " data bytes (trailing bytes: file damaged or not written by a safetensors writer)");
  }
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const SafetensorsTensor& SafetensorsFile::at(std::string_view name) const {
  if (const SafetensorsTensor* t = find(name)) return *t;
  throw SafetensorsError("safetensors file " + source_ + " has no tensor \"" + std::string(name) + "\"");
}

}  // namespace precon::worker
