// The dispatch point: the one place that knows whether the CUDA backend is compiled in.
// Front-end files call PRECON_DISPATCH(device, op, args...) after validating arguments.
#pragma once

#include "kernels/cpu/cpu.h"
#include "kernels/error.h"

namespace precon::kernels {
[[noreturn]] void throw_no_cuda(const char* op);
}

#if PRECON_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#define PRECON_DISPATCH(device, op, ...) \
  ((device) == ::precon::kernels::Device::cuda ? ::precon::kernels::cuda::op(__VA_ARGS__) \
                                              : ::precon::kernels::cpu::op(__VA_ARGS__))
#define PRECON_CUDA_DEVICE_COUNT() ::precon::kernels::cuda::device_count()
#define PRECON_CUDA_COMPILED true
#else
#define PRECON_DISPATCH(device, op, ...)                                                        \
  ((device) == ::precon::kernels::Device::cuda                                                  \
       ? (::precon::kernels::throw_no_cuda(#op), ::precon::kernels::cpu::op(__VA_ARGS__))      \
       : ::precon::kernels::cpu::op(__VA_ARGS__))
#define PRECON_CUDA_DEVICE_COUNT() 0
#define PRECON_CUDA_COMPILED false
#endif

