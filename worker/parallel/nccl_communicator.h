// The NCCL backend: collectives on GPU memory (host buffers, the trainer's few scalars, are
// staged through the device), bootstrapped by another communicator (MPI, or local for one rank)
// that carries NCCL's unique id. Compiled with the CUDA backend; without it every call says so.
#pragma once

#include <memory>

#include "worker/parallel/communicator.h"

namespace precon::worker {

bool nccl_available();

// One NCCL communicator over the ranks of `bootstrap` (a collective on it), on the current GPU.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap);

// Makes GPU (local_rank mod visible GPUs) current: ranks of one node share its GPUs one each.
void select_gpu_for_local_rank(int local_rank);

}  // namespace precon::worker
