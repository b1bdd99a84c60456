// The trainer's side of the NCCL communicator: its entry point in the CUDA backend's plugin.
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda_plugin.h"
#include "worker/common/error.h"
#include "worker/parallel/nccl_communicator.h"

namespace precon::worker {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap) {
  if (!kernels::cuda_compiled())
    throw WorkerError("parallel.backend = \"nccl\" needs a precon-train built with CUDA and NCCL");
  using Entry = Communicator* (*)(Communicator*);
  auto entry = reinterpret_cast<Entry>(kernels::cuda_plugin_symbol("precon_nccl_communicator"));
  if (!entry)
    throw WorkerError("parallel.backend = \"nccl\": the CUDA backend plugin was built without NCCL (configure found "
                      "no libnccl); install NCCL and rebuild, or use parallel.backend = \"mpi\" on the CPU");
  return std::unique_ptr<Communicator>(entry(&bootstrap));
}

void select_gpu_for_local_rank(int local_rank) { kernels::set_cuda_local_rank(local_rank); }

}  // namespace precon::worker
