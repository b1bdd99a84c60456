// The controller's one wall clock: what the store records (started_at, ended_at, event times) and
// what ages and deadlines on those records are measured against.
// Thread-safety: a free function over the system clock; callable from any thread.
#pragma once

#include <chrono>

namespace precon::orch {

// Seconds since the Unix epoch, with the system clock's resolution.
inline double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace precon::orch
