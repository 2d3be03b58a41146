// The matrix product through cuBLAS, with kernels::gemm's row-major contract.
// cuBLAS is column-major. A row-major (r, c) matrix with leading dimension ld is, read column-major, its
// transpose (c, r) with the same ld. So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: call
// cuBLAS with the operands swapped (B first), m = N, n = M, and each operand's own transpose flag.
//   fp32 (default): CUBLAS_DEFAULT_MATH, which never uses TF32 unless NVIDIA_TF32_OVERRIDE says so.
//   TF32: CUBLAS_TF32_TENSOR_OP_MATH; tolerance in cuda_kernels.h (kGemmTf32Tolerance).
//   BF16: cublasGemmEx on the same fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF: cuBLAS rounds A and B to bf16
//         on the way into its tensor-core tiles and accumulates in fp32 (kGemmBf16Tolerance). No bf16 copy of an
//         operand is ever stored, so nothing else in the step changes. _FAST_16BF permits bf16 or better: on the
//         H200 (cuBLAS 13) Nsight Compute names the same TF32 kernels (sm90_xmma_gemm_f32f32_tf32f32_*) for the
//         char GPT's products in this mode as in TF32's, at TF32's speed. bf16 products at bf16's rate need bf16
//         operands in memory (CUDA_R_16BF), which qkv does not store (bench/README.md, "CUDA", second lease).
// One cuBLAS handle per process (device 0, qkv's stream: stream.h), created on first use: its creation is where
// a missing device or driver shows up, as a qkv::Error naming gemm.
// cuBLAS is loaded with dlopen on that first use, not linked: cuBLASLt's static initialisation costs about 0.15 s
// of every process start (measured here), which every test process and every `qkv` command would otherwise
// pay whether or not it touches the GPU. The soname is the major version compiled against
// (libcublas.so.<CUBLAS_VER_MAJOR>), found through the loader's path or, failing that, the toolkit's library
// folder seen at configure time (QKV_CUDA_LIBRARY_DIR).
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/library.h"
#include "kernels/cuda/stream.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

std::atomic<MatmulPrecision> precision{MatmulPrecision::Fp32};
constexpr size_t kWorkspaceBytes = 32u << 20;

// cublasGemmEx's exported symbol (the header adds a C++ overload taking a cudaDataType compute type, so
// decltype(&cublasGemmEx) is ambiguous).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

// The cuBLAS entry points gemm uses (cublas_v2.h's cublasCreate and cublasSgemm are macros for the _v2 symbols).
struct Cublas {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSgemm_v2) sgemm;
  GemmEx gemm_ex;
};

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error("gemm", call, static_cast<int>(status));
}

Cublas load_cublas() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = open_library(soname, "gemm");
  const auto sym = [&](const char* name) { return library_symbol(lib, soname, name, "gemm"); };
  return Cublas{reinterpret_cast<decltype(&cublasCreate_v2)>(sym("cublasCreate_v2")),
                reinterpret_cast<decltype(&cublasSetMathMode)>(sym("cublasSetMathMode")),
                reinterpret_cast<decltype(&cublasSetStream_v2)>(sym("cublasSetStream_v2")),
                reinterpret_cast<decltype(&cublasSetWorkspace_v2)>(sym("cublasSetWorkspace_v2")),
                reinterpret_cast<decltype(&cublasSgemm_v2)>(sym("cublasSgemm_v2")),
                reinterpret_cast<GemmEx>(sym("cublasGemmEx"))};
}

struct Handle {
  Cublas api;
  cublasHandle_t h;
};

const Handle& handle() {
  static std::mutex mutex;
  static Handle state{};  // lives until the process ends: destroying it at exit can race the driver
  std::lock_guard<std::mutex> lock(mutex);
  if (!state.h) {
    if (!state.api.create) state.api = load_cublas();
    cublasHandle_t made = nullptr;
    const cublasStatus_t status = state.api.create(&made);
    cudaGetLastError();  // a failed creation leaves a (non-sticky) runtime error behind: not ours to report later
    check_cublas(status, "cublasCreate");
    check_cublas(state.api.set_stream(made, stream()), "cublasSetStream");
    // A workspace of our own, so that cuBLAS never allocates inside a CUDA graph's capture; 32 MiB is NVIDIA's
    // advice for Hopper's split-K kernels. Without the memory, cuBLAS keeps its default.
    void* workspace = nullptr;
    if (cudaMalloc(&workspace, kWorkspaceBytes) == cudaSuccess) {
      check_cublas(state.api.set_workspace(made, workspace, kWorkspaceBytes), "cublasSetWorkspace");
    } else {
      cudaGetLastError();  // not sticky
    }
    state.h = made;
  }
  return state;
}

}  // namespace

void set_matmul_precision(MatmulPrecision p) { precision.store(p); }
MatmulPrecision matmul_precision() { return precision.load(); }
void set_gemm_tf32(bool on) { precision.store(on ? MatmulPrecision::Tf32 : MatmulPrecision::Fp32); }
bool gemm_tf32() { return precision.load() == MatmulPrecision::Tf32; }

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
  const Handle& c = handle();
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const MatmulPrecision p = precision.load();
  if (p == MatmulPrecision::Bf16) {
    check_cublas(c.api.set_math_mode(c.h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check_cublas(c.api.gemm_ex(c.h, op_b, op_a, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                               CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
    return;
  }
  check_cublas(c.api.set_math_mode(c.h, p == MatmulPrecision::Tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
  check_cublas(c.api.sgemm(c.h, op_b, op_a, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc), "cublasSgemm");
}

}  // namespace qkv::kernels::cuda
