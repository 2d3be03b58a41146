#pragma once
// Copies between host memory and the GPU that do not wait for the work queued on qkv's stream (stream.h), through
// pinned buffers (cudaMallocHost) kept for the process: what lets a training loop queue the next step while the
// GPU runs this one (models/model_core.h: queue_train_step).
//   upload:     the host bytes are copied into a pinned buffer at once (the caller may reuse them), then queued as
//               a cudaMemcpyAsync behind the stream's work. A plain cudaMemcpy from pageable memory would wait for
//               everything queued before it (the step in flight).
//   read_later: a cudaMemcpyAsync into a pinned buffer queued behind the stream's work, and an event; take()
//               waits for that event only, and copies the bytes out.
// A buffer goes back to the pool when its upload's event has passed, or when its read is taken. Thread-safe.
// Pure C++: the CUDA types stay in host_copies.cpp.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace qkv::kernels::cuda {

class HostCopies {
 public:
  HostCopies() = default;
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;
  ~HostCopies();

  // Larger uploads go through a plain cudaMemcpy (weights on a move, a checkpoint's tensors: no buffer that size is
  // kept). A batch's ids are far smaller (64 x 256 ids: 64 KiB).
  static constexpr size_t kMaxUpload = size_t{1} << 20;

  // host -> device behind the stream's work; false (nothing done) above kMaxUpload.
  bool upload(void* dst, const void* src, size_t bytes, const char* op);

  // Device bytes to the host behind the stream's work: parts are (device pointer, bytes), copied one after another.
  struct Part {
    const void* src;
    size_t bytes;
  };
  uint64_t read_later(std::span<const Part> parts, const char* op);
  // Waits for read `id` and copies its bytes (all of them: dst_bytes must be their total) into dst.
  void take(uint64_t id, void* dst, size_t dst_bytes, const char* op);

 private:
  struct Buffer {
    unsigned char* pinned = nullptr;
    size_t capacity = 0;
    void* done = nullptr;  // cudaEvent_t recorded after the buffer's copy
    uint64_t read = 0;     // the read it holds until taken (0: none)
    size_t bytes = 0;      // the read's size
    bool busy = false;     // an upload in flight (free once `done` has passed) or a read not taken
  };
  // A buffer of at least `bytes`, not busy (waits for an upload's copy where every buffer is in use); locked.
  Buffer& acquire(size_t bytes, const char* op);

  std::mutex mutex_;
  std::vector<Buffer> buffers_;
  uint64_t next_read_ = 1;
};

// The process's (the CUDA backend's).
HostCopies& host_copies();

}  // namespace qkv::kernels::cuda
