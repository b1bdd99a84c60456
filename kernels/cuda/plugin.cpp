// The plugin's entry point: the CUDA backend's functions as the table the dispatch point calls
// through (kernels/backend_table.h). The rest of the plugin is hidden (-fvisibility=hidden), so
// loading it adds one symbol and cannot interpose on the program's own.
#include "kernels/backend_table.h"
#include "kernels/cuda/cuda.h"

namespace {

#define PRECON_BACKEND_ENTRY(op) &precon::kernels::cuda::op,
const precon::kernels::BackendTable kTable{
    precon::kernels::kBackendAbiVersion,
    sizeof(precon::kernels::BackendTable),
    PRECON_BACKEND_OPS(PRECON_BACKEND_ENTRY)
    &precon::kernels::cuda::device_count,
    &precon::kernels::cuda::select_device,
    &precon::kernels::cuda::memory_info,
};
#undef PRECON_BACKEND_ENTRY

}  // namespace

extern "C" __attribute__((visibility("default"))) const precon::kernels::BackendTable* precon_cuda_backend() {
  return &kTable;
}
