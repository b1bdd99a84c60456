#include "kernels/error.h"

#include <cstring>

namespace precon::kernels {

namespace {
std::string format(const std::string& op, const std::string& message, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return op + ": " + message + " [" + (base ? base + 1 : file) + ":" + std::to_string(line) + "]";
}
}  // namespace

KernelError::KernelError(std::string op, const std::string& message, const char* file, int line)
    : std::runtime_error(format(op, message, file, line)), op_(std::move(op)), file_(file), line_(line) {}

}  // namespace precon::kernels
