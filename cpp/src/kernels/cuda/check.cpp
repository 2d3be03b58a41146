// The CUDA error layer (check.h): failures become qkv::Error with the op's name and CUDA's words.
#include "kernels/cuda/check.h"

#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/stream.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

bool env_sync() {
  const char* v = std::getenv("QKV_CUDA_SYNC");
  return v && std::strcmp(v, "0") != 0 && *v != '\0';
}

std::atomic<bool>& sync_flag() {
  static std::atomic<bool> flag{env_sync()};
  return flag;
}

}  // namespace

std::string cuda_error_message(const char* op, const char* call, cudaError_t code) {
  // cudaGetErrorName/String only read static tables: they work without a driver or a device.
  return detail::cat(op, " (cuda): ", call, " failed: ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")");
}

std::string cublas_error_message(const char* op, const char* call, int status) {
  // cuBLAS's own cublasGetStatusName/String would need cuBLAS loaded (gemm.cpp loads it lazily): the names
  // of cublas_api.h's cublasStatus_t, with a short description each.
  const char *name = "CUBLAS_STATUS_UNKNOWN", *what = "unknown cuBLAS status";
  switch (static_cast<cublasStatus_t>(status)) {
    case CUBLAS_STATUS_SUCCESS: name = "CUBLAS_STATUS_SUCCESS", what = "success"; break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      name = "CUBLAS_STATUS_NOT_INITIALIZED", what = "cuBLAS could not initialise: no device, or no driver";
      break;
    case CUBLAS_STATUS_ALLOC_FAILED: name = "CUBLAS_STATUS_ALLOC_FAILED", what = "resource allocation failed"; break;
    case CUBLAS_STATUS_INVALID_VALUE: name = "CUBLAS_STATUS_INVALID_VALUE", what = "an invalid value was passed"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      name = "CUBLAS_STATUS_ARCH_MISMATCH", what = "the device does not support this feature";
      break;
    case CUBLAS_STATUS_MAPPING_ERROR: name = "CUBLAS_STATUS_MAPPING_ERROR", what = "GPU memory access failed"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      name = "CUBLAS_STATUS_EXECUTION_FAILED", what = "the GPU program failed to execute";
      break;
    case CUBLAS_STATUS_INTERNAL_ERROR:
      name = "CUBLAS_STATUS_INTERNAL_ERROR", what = "an internal operation failed";
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED: name = "CUBLAS_STATUS_NOT_SUPPORTED", what = "not supported"; break;
    case CUBLAS_STATUS_LICENSE_ERROR: name = "CUBLAS_STATUS_LICENSE_ERROR", what = "license error"; break;
  }
  return detail::cat(op, " (cuda): ", call, " failed: ", name, " (", what, ")");
}

void throw_cuda_error(const char* op, const char* call, cudaError_t code) {
  // Reported here, so consumed: the runtime also keeps a non-sticky error as the thread's last error, which a
  // later check_launch would otherwise pin on another op. (A sticky error comes back from every call anyway.)
  cudaGetLastError();
  throw Error(cuda_error_message(op, call, code));
}

bool event_done(void* event, const char* op) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    // Not an error, but it may be kept as the last one: clear it (only it), or the next launch's check reports it.
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  check_cuda(e, op, "cudaEventQuery");
  return true;
}

void throw_cublas_error(const char* op, const char* call, int status) {
  throw Error(cublas_error_message(op, call, status));
}

void check_launch(const char* op) {
  check_cuda(cudaGetLastError(), op, "kernel launch");
  if (!sync_after_launch()) return;
  // Inside a capture (exec/cuda/step_graph.h) nothing runs yet, and a wait would break it.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) return;
  check_cuda(cudaDeviceSynchronize(), op, "kernel (synchronised after launch)");
}

bool sync_after_launch() { return sync_flag().load(std::memory_order_relaxed); }
void set_sync_after_launch(bool on) { sync_flag().store(on, std::memory_order_relaxed); }

}  // namespace qkv::kernels::cuda
