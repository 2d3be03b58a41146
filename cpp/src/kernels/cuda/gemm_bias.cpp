// A Linear layer's product with its bias (and a ReLU) added in cuBLASLt's epilogue (cuda_kernels.h: gemm_bias), so
// that neither costs a pass of its own over the (rows, out) output: h = x w^T + b, or a = max(x w^T + b, 0).
// Mapping (gemm.cpp's): row-major h (rows, out) is column-major h^T (out, rows) = w x^T with w stored row-major
// (out, in), i.e. column-major (in, out) ld in, taken transposed (op A = T), and x row-major (rows, in), i.e.
// column-major (in, rows) ld in (op B = N); m = out, n = rows, k = in. CUBLASLT_EPILOGUE_BIAS adds a vector of
// length m to every column of D: b[j] to row j of h^T, which is column j of h. CUBLASLT_EPILOGUE_RELU_BIAS then
// takes max(., 0) of each element (for a NaN cuBLASLt documents no result): the pre-activation is never stored, which
// a ReLU layer does not need (its backward reads the sign of its output). GELU has no epilogue here: cuBLASLt's is
// the tanh approximation, qkv's (PyTorch's nn.GELU) the exact erf form. GELUTanh, which is cuBLASLt's form, does
// not take it either (it runs BIAS here, then bias_act's activation pass): the GELU_AUX_BIAS epilogue writes the
// pre-activation to an aux buffer with its own alignment and leading-dimension rules, cuBLASLt documents neither
// the accuracy of its tanh nor what it gives for large |h| (bias_act's is exactly h or 0, as PyTorch's float32),
// and the backward's DGELU_BGRAD would belong to another product (the one that makes da, linear2's backward);
// one elementwise pass over (rows, 4C) is small next to the product, and this path is checked against the
// reference executor (tests/cpp/cuda/backend_ops_test.cpp).
// Precision follows set_matmul_precision: CUBLAS_COMPUTE_32F, _FAST_TF32 or _FAST_16BF, fp32 scale and types.
// Per shape (and alignment of the pointers, which the algorithms depend on) the descriptors and the heuristic's
// first algorithm are made once and kept: after the first step no host allocation. Where cuBLASLt finds no
// algorithm, or is absent, gemm_bias returns false and the caller takes the plain gemm and bias pass; so does
// QKV_CUDA_LT=0 (A/B runs).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/library.h"
#include "kernels/cuda/stream.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = 32u << 20;  // cuBLASLt's split-K and stream-K algorithms use some

struct Lt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

// One shape's plan: descriptors and the chosen algorithm, kept for the process.
struct Plan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// (rows, out, in, precision, relu, alignment of x, w, h, bias)
using Key = std::tuple<int, int, int, int, bool, int, int, int, int>;

struct State {
  std::mutex mutex;
  bool tried = false, usable = false;
  Lt api{};
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<Key, Plan> plans;
};

State& state() {
  static State* s = new State;  // lives until the process ends (as gemm.cpp's handle)
  return *s;
}

bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("QKV_CUDA_LT");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// The library, a handle and the workspace, once; false (and the plain path from then on) where any is missing.
bool start(State& s) {
  if (s.tried) return s.usable;
  s.tried = true;
  try {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = open_library(soname, "gemm_bias");
    const auto sym = [&](const char* name) { return library_symbol(lib, soname, name, "gemm_bias"); };
    s.api = Lt{
        reinterpret_cast<decltype(&cublasLtCreate)>(sym("cublasLtCreate")),
        reinterpret_cast<decltype(&cublasLtMatmulDescCreate)>(sym("cublasLtMatmulDescCreate")),
        reinterpret_cast<decltype(&cublasLtMatmulDescSetAttribute)>(sym("cublasLtMatmulDescSetAttribute")),
        reinterpret_cast<decltype(&cublasLtMatrixLayoutCreate)>(sym("cublasLtMatrixLayoutCreate")),
        reinterpret_cast<decltype(&cublasLtMatmulPreferenceCreate)>(sym("cublasLtMatmulPreferenceCreate")),
        reinterpret_cast<decltype(&cublasLtMatmulPreferenceSetAttribute)>(sym("cublasLtMatmulPreferenceSetAttribute")),
        reinterpret_cast<decltype(&cublasLtMatmulPreferenceDestroy)>(sym("cublasLtMatmulPreferenceDestroy")),
        reinterpret_cast<decltype(&cublasLtMatmulAlgoGetHeuristic)>(sym("cublasLtMatmulAlgoGetHeuristic")),
        reinterpret_cast<decltype(&cublasLtMatmul)>(sym("cublasLtMatmul"))};
  } catch (const Error&) {
    return false;
  }
  if (s.api.create(&s.handle) != CUBLAS_STATUS_SUCCESS) return false;
  if (cudaMalloc(&s.workspace, kLtWorkspaceBytes) != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave nothing behind for the next call to report
    return false;
  }
  s.usable = true;
  return true;
}

int alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return u % 16 == 0 ? 16 : u % 8 == 0 ? 8 : 4;
}

Plan make_plan(State& s, int rows, int out, int in, MatmulPrecision precision, bool relu, const int (&align)[4]) {
  Plan p;
  const Lt& api = s.api;
  const cublasComputeType_t compute = precision == MatmulPrecision::Tf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : precision == MatmulPrecision::Bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                           : CUBLAS_COMPUTE_32F;
  if (api.desc_create(&p.desc, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return p;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  if (api.desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != CUBLAS_STATUS_SUCCESS ||
      api.desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != CUBLAS_STATUS_SUCCESS ||
      api.desc_set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue) != CUBLAS_STATUS_SUCCESS)
    return p;
  // A = w: column-major (in, out) ld in; B = x: (in, rows) ld in; C = D = h^T: (out, rows) ld out.
  if (api.layout_create(&p.a, CUDA_R_32F, in, out, in) != CUBLAS_STATUS_SUCCESS ||
      api.layout_create(&p.b, CUDA_R_32F, in, rows, in) != CUBLAS_STATUS_SUCCESS ||
      api.layout_create(&p.c, CUDA_R_32F, out, rows, out) != CUBLAS_STATUS_SUCCESS)
    return p;
  cublasLtMatmulPreference_t pref = nullptr;
  if (api.pref_create(&pref) != CUBLAS_STATUS_SUCCESS) return p;
  const uint64_t ws = kLtWorkspaceBytes;
  const uint32_t a_align = static_cast<uint32_t>(align[1]), b_align = static_cast<uint32_t>(align[0]),
                 c_align = static_cast<uint32_t>(align[2]);
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_align, sizeof a_align);
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_align, sizeof b_align);
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align, sizeof c_align);
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_align, sizeof c_align);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = api.heuristic(s.handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  api.pref_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found < 1 || result.state != CUBLAS_STATUS_SUCCESS) return p;
  p.algo = result.algo;
  p.ok = true;
  return p;
}

}  // namespace

namespace {

// The shape's plan, made on first use (null where cuBLASLt is off, absent, or has no algorithm, or the bias is not
// 16-byte aligned: the heuristic is not told the bias pointer, and on an H200 with cuBLAS 13 the algorithm it picks
// for a 4-byte-aligned bias fails in cublasLtMatmul with CUBLAS_STATUS_NOT_SUPPORTED). s.mutex held.
Plan* plan_for(State& s, int rows, int out, int in, const float* x, const float* w, const float* b, const float* h,
               bool relu) {
  if (!enabled() || rows <= 0 || out <= 0 || in <= 0 || !x || !w || !b || !h) return nullptr;
  if (!start(s)) return nullptr;
  const MatmulPrecision precision = matmul_precision();
  const int align[4] = {alignment(x), alignment(w), alignment(h), alignment(b)};
  if (align[3] < 16) return nullptr;
  const Key key{rows, out, in, static_cast<int>(precision), relu, align[0], align[1], align[2], align[3]};
  auto it = s.plans.find(key);
  if (it == s.plans.end()) it = s.plans.emplace(key, make_plan(s, rows, out, in, precision, relu, align)).first;
  return it->second.ok ? &it->second : nullptr;
}

}  // namespace

bool gemm_bias_planned(int rows, int out, int in, const float* x, const float* w, const float* b, const float* h,
                       bool relu) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return plan_for(s, rows, out, in, x, w, b, h, relu) != nullptr;
}

bool gemm_bias(int rows, int out, int in, const float* x, const float* w, const float* b, float* h, bool relu) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Plan* plan = plan_for(s, rows, out, in, x, w, b, h, relu);
  if (!plan) return false;
  Plan& p = *plan;
  if (s.api.desc_set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b) != CUBLAS_STATUS_SUCCESS) return false;
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t st = s.api.matmul(s.handle, p.desc, &one, w, p.a, x, p.b, &zero, h, p.c, h, p.c, &p.algo,
                                         s.workspace, kLtWorkspaceBytes, stream());
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    // Refused before anything was queued: this shape takes the plain path from now on.
    p.ok = false;
    return false;
  }
  if (st != CUBLAS_STATUS_SUCCESS) throw_cublas_error("gemm_bias", "cublasLtMatmul", static_cast<int>(st));
  check_launch("gemm_bias");
  return true;
}

}  // namespace qkv::kernels::cuda
