// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes
// of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// padded with spaces to a multiple of 8, then the raw little-endian tensor bytes. Offsets
// are relative to the data section, which tensors must cover contiguously with no overlap.
// The reader takes every dtype of the format, also from writers that pad the header to any
// length or not at all; what a consumer can use is its own check (safetensors_to_f32).
// Thread-safety: a SafetensorsFile is immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

// The format's dtypes; F8_* are the OCP 8-bit floats.
enum class SafetensorsDType : uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

const char* safetensors_dtype_name(SafetensorsDType dtype);  // "F32", ...
size_t safetensors_dtype_size(SafetensorsDType dtype);
std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name);

using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor to write: the caller's memory, contiguous, numel(shape) * dtype size bytes; or, where
// data is null, `produce`, which writes exactly those bytes to the sink when the file reaches the
// tensor (a tensor made, received or copied from a device one at a time while the file is written).
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<int64_t> shape;  // empty = scalar
  const void* data = nullptr;
  std::function<void(ByteSink&)> produce = nullptr;
};

// Serialises entries (names must be unique and not "__metadata__") to `out`. Data is laid
// out by decreasing element size, then in the given order, so every tensor stays aligned
// to its element size when the file is mapped. Throws SafetensorsError on bad entries.
void write_safetensors(ByteSink& out, std::span<const SafetensorsEntry> entries,
                       const SafetensorsMetadata& metadata = {});
// To a file, atomically (temp + fsync + rename).
void write_safetensors(const fs::path& path, std::span<const SafetensorsEntry> entries,
                       const SafetensorsMetadata& metadata = {});
std::vector<uint8_t> safetensors_bytes(std::span<const SafetensorsEntry> entries,
                                       const SafetensorsMetadata& metadata = {});

// One tensor of a parsed file; `bytes` points into the file's mapping or buffer.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;

  int64_t numel() const;
};

// The tensor's values as fp32 into `out` (numel() floats): F32 copied, F16 and BF16 widened
// (exactly). Any other dtype throws SafetensorsError naming the tensor and what to do.
void safetensors_to_f32(const SafetensorsTensor& tensor, std::span<float> out);

class SafetensorsFile {
 public:
  // Maps the file and validates it; errors (SafetensorsError) name the file and tensor.
  static SafetensorsFile open(const fs::path& path);
  // Validates bytes already in memory; `source` names them in errors.
  static SafetensorsFile parse(std::vector<uint8_t> bytes, const std::string& source);

  const SafetensorsMetadata& metadata() const { return metadata_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data order
  const SafetensorsTensor* find(std::string_view name) const;
  // Throws SafetensorsError naming the file when the tensor is absent.
  const SafetensorsTensor& at(std::string_view name) const;
  const std::string& source() const { return source_; }

 private:
  void parse_header(std::span<const std::byte> all);

  std::string source_;
  std::shared_ptr<MappedFile> mapping_;  // one of these two owns the bytes
  std::shared_ptr<std::vector<uint8_t>> buffer_;
  SafetensorsMetadata metadata_;
  std::vector<SafetensorsTensor> tensors_;
};

}  // namespace precon::worker
