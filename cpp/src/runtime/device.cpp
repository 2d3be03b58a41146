#include "qkv/device.h"

#include "qkv/cpu.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

#if QKV_CUDA
#include <cuda_runtime.h>

#include "exec/cuda/step_graph.h"
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
void set_cuda_precision(CudaPrecision precision) {
  using kernels::cuda::MatmulPrecision;
  kernels::cuda::set_matmul_precision(precision == CudaPrecision::TF32   ? MatmulPrecision::Tf32
                                      : precision == CudaPrecision::BF16 ? MatmulPrecision::Bf16
                                                                         : MatmulPrecision::Fp32);
}
void set_cuda_graphs(bool on) { kernels::cuda::step_graph().set_enabled(on); }
bool cuda_graphs() { return kernels::cuda::step_graph().enabled(); }
CudaPrecision cuda_precision() {
  using kernels::cuda::MatmulPrecision;
  const MatmulPrecision p = kernels::cuda::matmul_precision();
  return p == MatmulPrecision::Tf32   ? CudaPrecision::TF32
         : p == MatmulPrecision::Bf16 ? CudaPrecision::BF16
                                      : CudaPrecision::FP32;
}
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
  return "CUDA was not built (no nvcc at configure time, or QKV_CUDA=OFF): no CUDA device can be used";
}
void set_cuda_precision(CudaPrecision precision) {
  if (precision != CudaPrecision::FP32)
    throw Error(std::string("set_cuda_precision(") + to_string(precision) + "): " + cuda_unavailable_reason());
}
CudaPrecision cuda_precision() { return CudaPrecision::FP32; }
void set_cuda_graphs(bool) {}
bool cuda_graphs() { return false; }
#endif

void set_cuda_tf32(bool on) { set_cuda_precision(on ? CudaPrecision::TF32 : CudaPrecision::FP32); }
bool cuda_tf32() { return cuda_precision() == CudaPrecision::TF32; }

const char* to_string(CudaPrecision precision) {
  switch (precision) {
    case CudaPrecision::TF32: return "tf32";
    case CudaPrecision::BF16: return "bf16";
    default: return "fp32";
  }
}

CudaPrecision parse_cuda_precision(const std::string& name, const char* what) {
  for (CudaPrecision p : {CudaPrecision::FP32, CudaPrecision::TF32, CudaPrecision::BF16})
    if (name == to_string(p)) return p;
  throw Error(std::string(what) + " = \"" + name + "\": expected fp32, tf32 or bf16");
}

std::string device_summary() {
  std::string s = "cpu (" + active_isa() + ", " + std::to_string(num_threads()) + " threads); cuda: ";
  if (!cuda_built()) return s + "not built";
  return s + std::to_string(cuda_device_count()) + " device(s)";
}

}  // namespace qkv
