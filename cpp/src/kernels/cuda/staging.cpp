#include "kernels/cuda/staging.h"

#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"

namespace qkv::kernels::cuda {

PinnedStaging::~PinnedStaging() {
  for (Slot& s : slots_) {
    if (s.done) cudaEventDestroy(s.done);
    if (s.host) cudaFreeHost(s.host);
  }
}

void PinnedStaging::upload(void* dst, const void* src, size_t bytes, const char* op) {
  if (bytes == 0) return;
  Slot& s = slots_[next_];
  next_ ^= 1;
  // The slot's previous copy must have left it before it is overwritten (long done, in a training loop).
  if (s.done) check_cuda(cudaEventSynchronize(s.done), op, "cudaEventSynchronize");
  if (s.capacity < bytes) {
    if (s.host) cudaFreeHost(s.host);
    s.host = nullptr;
    s.capacity = 0;
    if (cudaMallocHost(&s.host, bytes) != cudaSuccess) {
      cudaGetLastError();  // not sticky; no pinned memory: the plain copy, which waits
      s.host = nullptr;
      check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), op, "cudaMemcpy host to device");
      return;
    }
    s.capacity = bytes;
  }
  if (!s.done) check_cuda(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), op, "cudaEventCreate");
  std::memcpy(s.host, src, bytes);
  check_cuda(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream()), op, "cudaMemcpyAsync");
  check_cuda(cudaEventRecord(s.done, stream()), op, "cudaEventRecord");
}

}  // namespace qkv::kernels::cuda
