// The matrix product through cuBLAS, with kernels::gemm's row-major contract.
// cuBLAS is column-major. A row-major (r, c) matrix with leading dimension ld is, read column-major, its
// transpose (c, r) with the same ld. So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: call
// cuBLAS with the operands swapped (B first), m = N, n = M, and each operand's own transpose flag.
//   fp32 (default): CUBLAS_DEFAULT_MATH, which never uses TF32 unless NVIDIA_TF32_OVERRIDE says so.
//   TF32 (set_gemm_tf32): CUBLAS_TF32_TENSOR_OP_MATH; tolerance in cuda_kernels.h (kGemmTf32Tolerance).
// One cuBLAS handle per process (device 0, the default stream), created on first use: its creation is where
// a missing device or driver shows up, as a qkv::Error naming gemm.
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

std::atomic<bool> tf32{false};

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error("gemm", call, static_cast<int>(status));
}

cublasHandle_t handle() {
  static std::mutex mutex;
  static cublasHandle_t h = nullptr;  // lives until the process ends: destroying it at exit can race the driver
  std::lock_guard<std::mutex> lock(mutex);
  if (!h) {
    cublasHandle_t made = nullptr;
    const cublasStatus_t status = cublasCreate(&made);
    cudaGetLastError();  // a failed creation leaves a (non-sticky) runtime error behind: not ours to report later
    check_cublas(status, "cublasCreate");
    h = made;
  }
  return h;
}

}  // namespace

void set_gemm_tf32(bool on) { tf32.store(on); }
bool gemm_tf32() { return tf32.load(); }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  check(M >= 0 && N >= 0 && K >= 0, "gemm (cuda): sizes M = ", M, ", N = ", N, ", K = ", K, ": expected non-negative");
  // Row-major leading dimensions: each is at least its matrix's row length (cuBLAS would say only
  // "invalid value").
  check(ldc >= std::max(1, N), "gemm (cuda): ldc = ", ldc, ": expected >= N = ", N);
  check(lda >= std::max(1, trans_a ? M : K), "gemm (cuda): lda = ", lda,
        ": expected >= ", trans_a ? "M = " : "K = ", trans_a ? M : K);
  check(ldb >= std::max(1, trans_b ? K : N), "gemm (cuda): ldb = ", ldb,
        ": expected >= ", trans_b ? "K = " : "N = ", trans_b ? K : N);
  if (M == 0 || N == 0) return;
  check(C != nullptr && (K == 0 || (A != nullptr && B != nullptr)), "gemm (cuda): null device pointer");
  cublasHandle_t h = handle();
  check_cublas(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  check_cublas(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                           B, ldb, A, lda, &beta, C, ldc),
               "cublasSgemm");
}

}  // namespace qkv::kernels::cuda
