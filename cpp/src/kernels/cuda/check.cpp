// The CUDA error layer (check.h): failures become qkv::Error with the op's name and CUDA's words.
#include "kernels/cuda/check.h"

#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

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
  const auto s = static_cast<cublasStatus_t>(status);
  return detail::cat(op, " (cuda): ", call, " failed: ", cublasGetStatusName(s), " (", cublasGetStatusString(s), ")");
}

void throw_cuda_error(const char* op, const char* call, cudaError_t code) {
  throw Error(cuda_error_message(op, call, code));
}

void throw_cublas_error(const char* op, const char* call, int status) {
  throw Error(cublas_error_message(op, call, status));
}

void check_launch(const char* op) {
  check_cuda(cudaGetLastError(), op, "kernel launch");
  if (sync_after_launch()) check_cuda(cudaDeviceSynchronize(), op, "kernel (synchronised after launch)");
}

bool sync_after_launch() { return sync_flag().load(std::memory_order_relaxed); }
void set_sync_after_launch(bool on) { sync_flag().store(on, std::memory_order_relaxed); }

}  // namespace qkv::kernels::cuda
