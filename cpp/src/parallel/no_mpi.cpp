// parallel/mpi.h in builds without MPI: never launched by MPI, so no session and no world.
#include <cstdlib>

#include "parallel/mpi.h"
#include "qkv/error.h"

namespace qkv::dist {

bool launched_by_mpi() { return false; }

// Started by mpirun with several ranks, each would train alone and write the same checkpoint: refused.
MpiSession::MpiSession() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* n = std::getenv(v);
    check(!n || std::atoi(n) <= 1, "started by an MPI launcher with ", n,
          " ranks, but this build of qkv has no MPI (install libopenmpi-dev and rebuild: CMake's FindMPI turns it on)");
  }
}
MpiSession::~MpiSession() = default;
std::unique_ptr<Communicator> mpi_world() {
  throw Error("this build of qkv has no MPI (install libopenmpi-dev and rebuild: CMake's FindMPI turns it on)");
}
void abort_all(int status) { std::exit(status); }

}  // namespace qkv::dist
