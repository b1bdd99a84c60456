// The dispatch point: CPU ops are called directly, CUDA ops through the plugin's table
// (kernels/cuda_plugin.h), which is loaded on the first CUDA op. Front-end files call
// PRECON_DISPATCH(device, op, args...) after validating arguments.
#pragma once

#include "kernels/cpu/cpu.h"
#include "kernels/cuda_plugin.h"

#define PRECON_DISPATCH(device, op, ...)                                                     \
  ((device) == ::precon::kernels::Device::cuda ? ::precon::kernels::cuda_backend().op(__VA_ARGS__) \
                                              : ::precon::kernels::cpu::op(__VA_ARGS__))
