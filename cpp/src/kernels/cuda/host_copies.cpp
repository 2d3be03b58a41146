#include "kernels/cuda/host_copies.h"

#include <cuda_runtime.h>

#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

namespace {
// Buffers kept at most: a few uploads per step (ids, padding) and a read per step in flight (three a model).
constexpr size_t kMaxBuffers = 64;
}  // namespace

HostCopies::~HostCopies() {
  // At exit the driver may already be gone: errors are ignored.
  for (Buffer& b : buffers_) {
    if (b.done) cudaEventDestroy(static_cast<cudaEvent_t>(b.done));
    if (b.pinned) cudaFreeHost(b.pinned);
  }
  cudaGetLastError();
}

HostCopies::Buffer& HostCopies::acquire(size_t bytes, const char* op) {
  Buffer* pick = nullptr;
  for (Buffer& b : buffers_) {
    // An upload's buffer is free again once its copy has run.
    if (b.busy && b.read == 0 && event_done(b.done, op)) b.busy = false;
    if (!b.busy && (!pick || (pick->capacity < bytes && b.capacity > pick->capacity))) pick = &b;
  }
  if (!pick && buffers_.size() < kMaxBuffers) {
    cudaEvent_t event = nullptr;  // made first: a failure leaves no buffer without one in the pool
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op, "cudaEventCreateWithFlags");
    buffers_.emplace_back();
    pick = &buffers_.back();
    pick->done = event;
  }
  if (!pick) {
    // Every buffer holds an upload in flight or a read not taken: wait for the first upload.
    for (Buffer& b : buffers_) {
      if (b.read != 0) continue;
      check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(b.done)), op, "cudaEventSynchronize");
      b.busy = false;
      pick = &b;
      break;
    }
    check(pick != nullptr, op, " (cuda): ", kMaxBuffers, " reads queued and not taken");
  }
  if (pick->capacity < bytes) {
    if (pick->pinned) check_cuda(cudaFreeHost(pick->pinned), op, "cudaFreeHost");
    pick->pinned = nullptr;
    pick->capacity = 0;
    void* host = nullptr;
    const size_t capacity = bytes < 4096 ? 4096 : bytes;
    check_cuda(cudaMallocHost(&host, capacity), op, "cudaMallocHost");
    pick->pinned = static_cast<unsigned char*>(host);
    pick->capacity = capacity;
  }
  return *pick;
}

bool HostCopies::upload(void* dst, const void* src, size_t bytes, const char* op) {
  if (bytes > kMaxUpload) return false;
  if (bytes == 0) return true;
  const std::lock_guard<std::mutex> lock(mutex_);
  Buffer& b = acquire(bytes, op);
  std::memcpy(b.pinned, src, bytes);
  check_cuda(cudaMemcpyAsync(dst, b.pinned, bytes, cudaMemcpyHostToDevice, stream()), op, "cudaMemcpyAsync");
  // Busy from the copy on: should the record fail, the buffer is not handed out again before the copy is done.
  b.busy = true;
  b.read = 0;
  const cudaError_t recorded = cudaEventRecord(static_cast<cudaEvent_t>(b.done), stream());
  if (recorded != cudaSuccess) {
    if (cudaStreamSynchronize(stream()) == cudaSuccess) b.busy = false;  // the copy is done: free again
    check_cuda(recorded, op, "cudaEventRecord");
  }
  return true;
}

uint64_t HostCopies::read_later(std::span<const Part> parts, const char* op) {
  size_t bytes = 0;
  for (const Part& p : parts) bytes += p.bytes;
  const std::lock_guard<std::mutex> lock(mutex_);
  Buffer& b = acquire(bytes, op);
  size_t at = 0;
  for (const Part& p : parts) {
    if (p.bytes == 0) continue;
    check(p.src != nullptr, op, " (cuda): a read of ", p.bytes, " bytes from a null device pointer");
    check_cuda(cudaMemcpyAsync(b.pinned + at, p.src, p.bytes, cudaMemcpyDeviceToHost, stream()), op, "cudaMemcpyAsync");
    at += p.bytes;
  }
  b.busy = true;  // from the copies on (see upload)
  b.read = next_read_++;
  b.bytes = bytes;
  const cudaError_t recorded = cudaEventRecord(static_cast<cudaEvent_t>(b.done), stream());
  if (recorded != cudaSuccess) {
    b.read = 0;
    const cudaError_t waited = cudaStreamSynchronize(stream());
    if (waited == cudaSuccess) b.busy = false;
    check_cuda(recorded, op, "cudaEventRecord");
  }
  return b.read;
}

void HostCopies::take(uint64_t id, void* dst, size_t dst_bytes, const char* op) {
  void* done = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const Buffer* b = nullptr;
    for (const Buffer& x : buffers_)
      if (x.read == id && id != 0) b = &x;
    check(b != nullptr, op, " (cuda): read ", id, " was never queued or was taken already");
    check(b->bytes == dst_bytes, op, " (cuda): read ", id, " holds ", b->bytes, " bytes, not ", dst_bytes);
    done = b->done;
  }
  // Only this read's event, unlocked: the work queued after it (the next step) goes on, and other threads may use
  // the pool meanwhile. The buffer stays this read's (busy) until it is copied out; buffers_ may grow, so it is
  // found again.
  const cudaError_t waited = cudaEventSynchronize(static_cast<cudaEvent_t>(done));
  const std::lock_guard<std::mutex> lock(mutex_);
  for (Buffer& x : buffers_) {
    if (x.read != id) continue;
    if (waited == cudaSuccess) std::memcpy(dst, x.pinned, dst_bytes);
    x.read = 0;
    x.busy = false;
  }
  check_cuda(waited, op, "cudaEventSynchronize");
}

HostCopies& host_copies() {
  static HostCopies copies;
  return copies;
}

}  // namespace qkv::kernels::cuda
