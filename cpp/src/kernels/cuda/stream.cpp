#include "kernels/cuda/stream.h"

#include <atomic>
#include <mutex>

namespace qkv::kernels::cuda {
namespace {

constexpr int kMaxDevices = 64;
std::atomic<cudaStream_t> streams[kMaxDevices];  // never destroyed: destroying at exit can race the driver

}  // namespace

cudaStream_t stream() noexcept {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();  // not sticky: the launch or copy that follows fails and names its op
    return nullptr;
  }
  std::atomic<cudaStream_t>& slot = streams[device];
  if (cudaStream_t s = slot.load(std::memory_order_acquire)) return s;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (cudaStream_t s = slot.load(std::memory_order_acquire)) return s;
  cudaStream_t made = nullptr;
  if (cudaStreamCreate(&made) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  slot.store(made, std::memory_order_release);
  return made;
}

}  // namespace qkv::kernels::cuda
