// The MPI backend and the MPI session of a process (OpenMPI; ranks from mpirun or from srun with
// PMIx). Only worker/parallel/ includes MPI itself.
#pragma once

#include <memory>

#include "worker/parallel/communicator.h"

namespace precon::worker {

// MPI_Init on construction (funneled: only the training thread calls MPI), MPI_Finalize on
// destruction. Throws WorkerError when this build has no MPI.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  // MPI_COMM_WORLD as a Communicator (a duplicate, so its collectives never mix with others').
  std::unique_ptr<Communicator> world() const;
};

// Ends every rank of the job at once with `code` (MPI_Abort): a failed rank must not leave the
// others waiting in a collective.
[[noreturn]] void abort_mpi_job(int code);

}  // namespace precon::worker
