#include "qkv/device.h"

#include "qkv/cpu.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

#if QKV_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"
#endif

namespace qkv {

#if QKV_CUDA
bool cuda_built() { return true; }
int cuda_device_count() {
  int n = 0;
  // No driver or no GPU is an error code here, not a crash: report zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error behind for the next CUDA call to report
    return 0;
  }
  return n;
}
std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(e) + " (" +
           cudaGetErrorString(e) + ")";
  }
  return n > 0 ? std::string() : std::string("no CUDA device: cudaGetDeviceCount reports 0 devices");
}
void set_cuda_tf32(bool on) { kernels::cuda::set_gemm_tf32(on); }
bool cuda_tf32() { return kernels::cuda::gemm_tf32(); }
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
  return "CUDA was not built (no nvcc at configure time, or QKV_CUDA=OFF): no CUDA device can be used";
}
void set_cuda_tf32(bool on) {
  if (on) throw Error("set_cuda_tf32(true): " + cuda_unavailable_reason());
}
bool cuda_tf32() { return false; }
#endif

std::string device_summary() {
  std::string s = "cpu (" + active_isa() + ", " + std::to_string(num_threads()) + " threads); cuda: ";
  if (!cuda_built()) return s + "not built";
  return s + std::to_string(cuda_device_count()) + " device(s)";
}

}  // namespace qkv
