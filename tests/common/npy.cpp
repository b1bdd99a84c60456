#include "tests/common/npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace precon::test {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (did the reference script run?)");
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw std::runtime_error(path + ": not a .npy file");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint16_t len16;
    in.read(reinterpret_cast<char*>(&len16), 2);
    header_len = len16;
  } else {
    in.read(reinterpret_cast<char*>(&header_len), 4);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  std::smatch match;
  if (!std::regex_search(header, match, std::regex("'descr':\\s*'([<|]?[a-z][0-9])'")))
    throw std::runtime_error(path + ": no dtype in header");
  std::string descr = match[1];
  if (header.find("'fortran_order': True") != std::string::npos)
    throw std::runtime_error(path + ": Fortran order is not supported");
  if (!std::regex_search(header, match, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    throw std::runtime_error(path + ": no shape in header");
  NpyArray arr;
  std::string dims = match[1];
  std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    arr.shape.push_back(std::stoll(it->str()));
  const int64_t n = arr.numel();
  arr.values.resize(n);
  auto read_all = [&](auto sample) {
    std::vector<decltype(sample)> raw(n);
    in.read(reinterpret_cast<char*>(raw.data()), n * sizeof(sample));
    if (!in) throw std::runtime_error(path + ": truncated data");
    for (int64_t i = 0; i < n; ++i) arr.values[i] = static_cast<double>(raw[i]);
  };
  if (descr == "<f4") read_all(float{});
  else if (descr == "<f8") read_all(double{});
  else if (descr == "<i4") read_all(int32_t{});
  else throw std::runtime_error(path + ": unsupported dtype " + descr);
  return arr;
}

}  // namespace precon::test
