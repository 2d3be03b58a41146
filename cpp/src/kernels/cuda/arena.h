#pragma once
// DeviceArena: the GPU counterpart of qkv::Workspace. Every buffer of a pass on the GPU (activations,
// scratch, token ids, parameter views) comes from ONE cudaMalloc, sized per shape:
//   arena.plan([&](DeviceArena& a) { x = a.take(rows * C); ids = a.take_ints(rows); ... });
// plan(fn) runs fn twice: a counting pass (take() returns nullptr and only adds up sizes), then the real
// pass over one allocation. A training loop that keeps its shape never calls cudaMalloc again; a larger
// shape means one new plan (the old block is freed first). Every buffer starts 256-byte aligned (what
// cudaMalloc guarantees, and enough for any vector access) and zero-filled.
//
// Host code only (no kernels): the counting pass works on a machine without a GPU, so a plan's size can be
// checked anywhere; allocation failures (no device, out of memory) become qkv::Error naming the size.
#include <cstddef>
#include <cstdint>
#include <functional>

namespace qkv::kernels::cuda {

class DeviceArena {
 public:
  static constexpr size_t kAlign = 256;

  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Counts what fn takes, allocates that once (reusing the current block when it is large enough) and runs
  // fn again with real device pointers.
  void plan(const std::function<void(DeviceArena&)>& fn);
  // The bytes fn would take, without allocating: no device needed.
  static size_t measure(const std::function<void(DeviceArena&)>& fn);

  // Device pointers to n elements; nullptr during the counting pass. Only valid inside plan().
  float* take(size_t n) { return static_cast<float*>(take_bytes(n * sizeof(float))); }
  int32_t* take_ints(size_t n) { return static_cast<int32_t*>(take_bytes(n * sizeof(int32_t))); }
  double* take_doubles(size_t n) { return static_cast<double*>(take_bytes(n * sizeof(double))); }
  void* take_bytes(size_t bytes);

  size_t size_bytes() const { return capacity_; }

 private:
  void release() noexcept;

  char* base_ = nullptr;  // device memory
  size_t capacity_ = 0, offset_ = 0;
  bool counting_ = false, planning_ = false;
};

}  // namespace qkv::kernels::cuda
