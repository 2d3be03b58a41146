#pragma once
// Host-to-device copies that do not wait for the GPU: the bytes go into page-locked (pinned) host memory and
// cudaMemcpyAsync takes them from there, in stream order, while the host goes on queueing work. A plain
// cudaMemcpy from pageable memory would first wait for every kernel queued before it (a stall in the middle of a
// step: the embedding backward's row lists).
// Two slots, used in turn; each remembers the event recorded after its last copy, and is refilled only after that
// copy has finished (two uploads in one step, as a Seq2Seq's two embeddings, never wait on each other). Slots
// grow to the largest upload and stay: no allocation once a model's shapes have been seen. Where pinned memory
// cannot be had, the copy is the plain synchronous one.
#include <cuda_runtime.h>

#include <cstddef>

namespace qkv::kernels::cuda {

class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging();

  // dst (device) = src (host, `bytes`), queued on qkv's stream (stream.h); src may be reused as soon as this returns.
  void upload(void* dst, const void* src, size_t bytes, const char* op);

 private:
  struct Slot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;  // recorded after the slot's last copy
  };
  Slot slots_[2];
  int next_ = 0;
};

}  // namespace qkv::kernels::cuda
