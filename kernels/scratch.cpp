#include "kernels/scratch.h"

#include <array>

#include "kernels/backend.h"
#include "kernels/error.h"

namespace precon::kernels {

namespace {
struct Slots {
  std::array<Buffer, kScratchSlots> cpu;
  std::array<Buffer, kScratchSlots> cuda;
};

Slots& slots() {
  // Deliberately never destroyed: GPU buffers must not be freed after the CUDA runtime has shut
  // down at process exit.
  thread_local Slots* s = new Slots();
  return *s;
}
}  // namespace

Tensor scratch(Device device, int slot, std::initializer_list<int64_t> shape, DType dtype) {
  PRECON_REQUIRE(slot >= 0 && slot < kScratchSlots, ShapeError, "scratch", "slot out of range");
  Tensor probe = Tensor::view(nullptr, shape, dtype, device);
  Buffer& buf = (device == Device::cpu ? slots().cpu : slots().cuda)[slot];
  if (buf.bytes() < probe.nbytes()) buf = Buffer(device, probe.nbytes());
  return buf.view(shape, dtype);
}

}  // namespace precon::kernels
