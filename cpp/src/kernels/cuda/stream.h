#pragma once
// The stream every qkv kernel, copy and cuBLAS/cuBLASLt call is queued on: one per device, made on first use
// there and kept for the process.
// Why not the legacy default stream (stream 0): work on it cannot be captured into a CUDA graph, and it orders
// qkv's work against every other CUDA user of the process. Why a blocking stream (cudaStreamCreate, not
// cudaStreamNonBlocking): it still synchronises with the legacy stream, so a plain cudaMemcpy (upload,
// download, a user's own) stays ordered after the kernels queued before it, as it was on stream 0.
#include <cuda_runtime.h>

namespace qkv::kernels::cuda {

// The current device's qkv stream. Never throws: where there is no device (or no stream can be made) it returns
// the legacy default stream (nullptr), so that the launch or copy it is passed to fails as before and its error
// names that op (check.h); nothing is kept, the next call tries again.
cudaStream_t stream() noexcept;

}  // namespace qkv::kernels::cuda
