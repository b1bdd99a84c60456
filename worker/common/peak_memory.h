// The process's peak resident memory, for the trainer's memory_peak_bytes.
#pragma once

#include <cstdint>

namespace precon::worker {

// VmHWM of /proc/self/status in bytes (the kernel's high-water mark of resident memory since the
// process started); 0 where the file cannot be read.
int64_t peak_resident_bytes();

}  // namespace precon::worker
