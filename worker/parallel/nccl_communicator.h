// The NCCL backend: collectives on GPU memory (host buffers, the trainer's few scalars, are
// staged through the device), bootstrapped by another communicator (MPI, or local for one rank)
// that carries NCCL's unique id. It lives in the CUDA backend's plugin (nccl_communicator.cpp
// there); these calls load the plugin when a run asks for NCCL, so no other run maps it.
#pragma once

#include <memory>

#include "worker/parallel/communicator.h"

namespace precon::worker {

// One NCCL communicator over the ranks of `bootstrap` (a collective on it), on the current GPU.
// Throws kernels::PluginError when the plugin cannot be loaded, WorkerError when it has no NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap);

// Makes GPU (local_rank mod visible GPUs) current once the CUDA backend loads: ranks of one node
// share its GPUs one each. Loads nothing itself.
void select_gpu_for_local_rank(int local_rank);

}  // namespace precon::worker
