// Minimal reader for NumPy .npy files (little-endian float32 / float64 / int32, C order), used by
// the reference tests whose expected values come from a Python script.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace precon::test {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<double> values;  // converted to double whatever the stored dtype
  int64_t numel() const;
};

// Throws std::runtime_error naming the file and what was wrong.
NpyArray read_npy(const std::string& path);

}  // namespace precon::test
