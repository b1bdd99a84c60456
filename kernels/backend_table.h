// The CUDA backend as one table of function pointers. The backend is a plugin
// (libprecon_cuda.so, kernels/cuda/plugin.cpp) that fills the table; the dispatch point calls
// through it. Programs therefore link no CUDA library and map none unless a run asks for the
// GPU (kernels/cuda_plugin.h loads the plugin then).
#pragma once

#include <cstddef>

#include "kernels/cpu/cpu.h"

namespace precon::kernels {

// Every op of kernels/backend_ops.inc, by name. The slots take the CPU functions' types, which
// the backends share; an op declared there and missing here fails to compile where it is
// dispatched.
#define PRECON_BACKEND_OPS(X)                                                                      \
  X(device_malloc) X(device_free) X(synchronize) X(copy) X(fill_zero)                              \
  X(gemm) X(syrk) X(axpby) X(cautious_axpby) X(scale) X(add) X(transpose) X(cast)                  \
  X(sum_squares) X(sum_squares_along) X(scale_along) X(copy_strided) X(all_finite)                 \
  X(symmetric_eigh) X(eigen_reconstruct) X(qr_orthonormal)                                         \
  X(encoder_forward) X(encoder_backward) X(layernorm_forward) X(layernorm_backward)                \
  X(gelu_forward) X(gelu_backward) X(embedding_forward) X(embedding_backward)                      \
  X(rmsnorm_forward) X(rmsnorm_backward) X(rope_forward) X(rope_backward)                          \
  X(swiglu_forward) X(swiglu_backward) X(qkv_pack_forward) X(qkv_pack_backward)                    \
  X(moe_router_forward) X(moe_router_backward) X(gather_rows) X(scatter_add_rows)                  \
  X(moe_combine_forward) X(moe_combine_backward) X(matmul_forward) X(matmul_backward)              \
  X(attention_forward) X(attention_backward) X(crossentropy_forward) X(crossentropy_backward)      \
  X(adamw_update)

// Raised whenever the table's layout or the types it passes (Tensor, the op parameters) change:
// a plugin from another build is refused rather than called with the wrong layout.
constexpr int kBackendAbiVersion = 4;

// The plugin's one entry point: extern "C" const BackendTable* precon_cuda_backend().
constexpr const char* kBackendEntryPoint = "precon_cuda_backend";

struct BackendTable {
  int abi_version;    // kBackendAbiVersion of the plugin's build
  size_t table_size;  // sizeof(BackendTable) there
#define PRECON_BACKEND_SLOT(op) decltype(&cpu::op) op;
  PRECON_BACKEND_OPS(PRECON_BACKEND_SLOT)
#undef PRECON_BACKEND_SLOT
  int (*device_count)();                 // 0 when no driver or no GPU; never throws
  void (*select_device)(int local_rank);  // GPU (local_rank mod visible GPUs) becomes current
  void (*memory_info)(size_t* free_bytes, size_t* total_bytes);  // the current GPU's (cudaMemGetInfo)
};

}  // namespace precon::kernels
