// DeviceArena (arena.h): one cudaMalloc per shape, handed out in 256-byte-aligned pieces.
#include "kernels/cuda/arena.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

DeviceArena::~DeviceArena() { release(); }

void DeviceArena::release() noexcept {
  if (base_) cudaFree(base_);  // an error here (a lost context) has nowhere to go from a destructor
  base_ = nullptr;
  capacity_ = 0;
}

void* DeviceArena::take_bytes(size_t bytes) {
  check(planning_, "DeviceArena::take called outside DeviceArena::plan");
  const size_t start = offset_;
  offset_ += (bytes + kAlign - 1) / kAlign * kAlign;
  if (counting_) return nullptr;
  check(offset_ <= capacity_, "DeviceArena::take: the plan asked for more (", offset_,
        " bytes) than its counting pass did (", capacity_, " bytes)");
  return base_ + start;
}

size_t DeviceArena::measure(const std::function<void(DeviceArena&)>& fn) {
  DeviceArena a;
  a.planning_ = a.counting_ = true;
  fn(a);
  return a.offset_;
}

void DeviceArena::plan(const std::function<void(DeviceArena&)>& fn) {
  const size_t needed = measure(fn);
  if (needed > capacity_) {
    release();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, needed);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the (non-sticky) error so that later calls do not report it again
      throw Error(cuda_error_message("DeviceArena::plan", detail::cat("cudaMalloc of ", needed, " bytes").c_str(), e));
    }
    base_ = static_cast<char*>(p);
    capacity_ = needed;
  }
  if (needed > 0) check_cuda(cudaMemset(base_, 0, needed), "DeviceArena::plan", "cudaMemset");
  planning_ = true;
  offset_ = 0;
  try {
    fn(*this);
  } catch (...) {
    planning_ = false;
    throw;
  }
  planning_ = false;
}

}  // namespace qkv::kernels::cuda
