// Typed errors thrown by kernels. Library code never exits; only main maps errors to codes.
#pragma once

#include <stdexcept>
#include <string>

namespace precon::kernels {

class KernelError : public std::runtime_error {
 public:
  KernelError(std::string op, const std::string& message, const char* file, int line);
  const std::string& op() const { return op_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string op_;
  const char* file_;
  int line_;
};

// Shapes, dtypes or devices of the arguments do not fit the op.
class ShapeError : public KernelError {
  using KernelError::KernelError;
};
// An input contained NaN or Inf.
class NonFiniteError : public KernelError {
  using KernelError::KernelError;
};
// The dtype/device combination is not implemented, or the backend is not compiled in.
class UnsupportedError : public KernelError {
  using KernelError::KernelError;
};
// The CUDA backend's plugin is missing or cannot be loaded: the message names the path and why.
class PluginError : public UnsupportedError {
  using UnsupportedError::UnsupportedError;
};
// A numerical routine failed (eigensolver did not converge, iteration diverged).
class NumericalError : public KernelError {
  using KernelError::KernelError;
};
// A library call (BLAS, LAPACK, CUDA, cuBLAS, cuSOLVER) returned an error code.
class BackendError : public KernelError {
  using KernelError::KernelError;
};
// An allocation the device (or the host) could not satisfy.
class OutOfMemoryError : public BackendError {
  using BackendError::BackendError;
};

}  // namespace precon::kernels

#define PRECON_THROW(Type, op, msg) throw ::precon::kernels::Type((op), (msg), __FILE__, __LINE__)

#define PRECON_REQUIRE(cond, Type, op, msg) \
  do {                                      \
    if (!(cond)) PRECON_THROW(Type, op, msg); \
  } while (0)
