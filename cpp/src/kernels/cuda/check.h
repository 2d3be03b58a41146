#pragma once
// The CUDA error layer: every CUDA runtime and cuBLAS call in kernels/cuda goes through one of these checks,
// which turn a failure into a qkv::Error naming the op, the call and CUDA's own words for the error, e.g.
//   "layernorm_forward (cuda): kernel launch failed: cudaErrorNoDevice (no CUDA-capable device is detected)".
// Never an abort: the caller can catch it, and a model stays usable after a rejected call (a sticky error
// such as an illegal address is the exception CUDA makes: the context is then lost for the process).
//
// Kernels run asynchronously, so an error inside a kernel surfaces at the next synchronising call (a
// download, sum_squares) and is reported there under that op's name. set_sync_after_launch(true), or the
// environment variable QKV_CUDA_SYNC=1, synchronises after every launch so that the failing op is named.
#include <cuda_runtime.h>

#include <string>

namespace qkv::kernels::cuda {

// "<op> (cuda): <call> failed: <cudaErrorName> (<description>)". Pure: no CUDA call beyond the error tables.
std::string cuda_error_message(const char* op, const char* call, cudaError_t code);
// "<op> (cuda): <call> failed: <CUBLAS_STATUS_NAME> (<description>)". The status is an int so that this
// header needs no cuBLAS include; it is a cublasStatus_t.
std::string cublas_error_message(const char* op, const char* call, int status);

[[noreturn]] void throw_cuda_error(const char* op, const char* call, cudaError_t code);
[[noreturn]] void throw_cublas_error(const char* op, const char* call, int status);

inline void check_cuda(cudaError_t code, const char* op, const char* call) {
  if (code != cudaSuccess) throw_cuda_error(op, call, code);
}

// Whether the work before a cudaEvent_t (passed as void*) is done, without waiting; a failure throws naming op.
bool event_done(void* event, const char* op);

// After a kernel launch: a bad configuration or a missing device is reported by cudaGetLastError at once;
// with sync_after_launch() the launch is also waited for, so that an error inside the kernel names this op.
void check_launch(const char* op);

bool sync_after_launch();
void set_sync_after_launch(bool on);

}  // namespace qkv::kernels::cuda
