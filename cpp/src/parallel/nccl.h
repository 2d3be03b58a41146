#pragma once
// NCCL: the process group of data-parallel training on GPU tensors (QKV_NCCL builds: CUDA with NCCL's
// header and library under the toolkit, and MPI to start it). Gradient buckets are summed with ncclAllReduce on
// a stream of its own, ordered after the work queued on CUDA's default stream (where the CUDA executor queues
// everything); the small host values go through the host communicator (MPI).
#include <memory>

#include "parallel/communicator.h"

namespace qkv::dist {

// Rank r of `host`'s group on the current GPU: the NCCL unique id is made by rank 0 and broadcast over `host`,
// which the result keeps for its host collectives.
std::unique_ptr<Communicator> nccl_world(std::unique_ptr<Communicator> host);

// Makes this rank's GPU current: the local rank on its host (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
// SLURM_LOCALID; else 0) modulo the GPUs present. Call before the model moves to the GPU. Returns the device.
int select_local_gpu();

}  // namespace qkv::dist
