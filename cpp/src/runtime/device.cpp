#include "qkv/device.h"

#include "qkv/cpu.h"
#include "qkv/thread_pool.h"

#if QKV_CUDA
#include <cuda_runtime.h>
#endif

namespace qkv {

#if QKV_CUDA
bool cuda_built() { return true; }
int cuda_device_count() {
  int n = 0;
  // No driver or no GPU is an error code here, not a crash: report zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
#endif

std::string device_summary() {
  std::string s = "cpu (" + active_isa() + ", " + std::to_string(num_threads()) + " threads); cuda: ";
  if (!cuda_built()) return s + "not built";
  return s + std::to_string(cuda_device_count()) + " device(s)";
}

}  // namespace qkv
