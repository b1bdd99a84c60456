// Typed errors thrown by the worker library. Library code never exits; only main maps an
// error to an exit code. Every message names the file (and tensor/position where there is
// one) and, where the operator can act, says what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace precon::worker {

// Base of every worker error (those below, and ConfigError, ReportError, HttpClientError,
// OptimizerError, ModelIoError, TrainingError beside their parts), so main can catch one type
// and the controller's HTTP layer maps them in one place (orchestrator/http/errors.h).
class WorkerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad, missing or mismatched training data: shards, corpora, loader state.
class DataError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

// A safetensors file (or buffer) is malformed, or a requested tensor is absent.
class SafetensorsError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

// An operating-system call on a file failed. The message holds the path and strerror text;
// sys_errno() keeps the code so callers can tell "disk full" (ENOSPC) from the rest.
class IoError : public WorkerError {
 public:
  IoError(const std::string& message, int sys_errno) : WorkerError(message), sys_errno_(sys_errno) {}
  int sys_errno() const { return sys_errno_; }

 private:
  int sys_errno_;
};

// A checkpoint could not be written, or none that verifies could be found.
// When caused by an OS error, sys_errno() is its code (0 otherwise).
class CheckpointError : public WorkerError {
 public:
  explicit CheckpointError(const std::string& message, int sys_errno = 0)
      : WorkerError(message), sys_errno_(sys_errno) {}
  int sys_errno() const { return sys_errno_; }

 private:
  int sys_errno_;
};

}  // namespace precon::worker
