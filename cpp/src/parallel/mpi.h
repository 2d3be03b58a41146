#pragma once
// MPI (Open MPI under `mpirun -np N`): the process group of data-parallel training on CPU tensors. Built when
// CMake's FindMPI finds MPI (QKV_MPI); without it, launched_by_mpi() is false and world() throws.
#include <memory>

#include "parallel/communicator.h"

namespace qkv::dist {

// True when this build has MPI and the process was started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK): only then is MPI initialised, so a plain `qkv train` runs exactly as without MPI.
bool launched_by_mpi();

// MPI_Init_thread on construction, MPI_Finalize on destruction (a no-op pair when not launched by MPI).
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  bool active() const { return active_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  bool active_ = false;
  int rank_ = 0, size_ = 1;
};

// MPI_COMM_WORLD's ranks (an active MpiSession must exist).
std::unique_ptr<Communicator> mpi_world();

// Ends every rank of the job at once (MPI_Abort): a rank that fails while the others wait in a reduction. The
// launcher then reports the rank; the others never hang.
[[noreturn]] void abort_all(int status);

}  // namespace qkv::dist
