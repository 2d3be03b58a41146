// Matrix product: the selection table (best instruction set first, scalar last), the threading over rows
// of C, and the naive reference that every variant is tested against.
#include <algorithm>

#include "kernels/cpu/gemm_rows.h"
#include "kernels/cpu/isa.h"
#include "kernels/kernels.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {
namespace {

using GemmRowsFn = void (*)(const GemmArgs&, int, int);

void gemm_rows_scalar(const GemmArgs& g, int i0, int i1) {
  for (int i = i0; i < i1; ++i) {
    for (int j = 0; j < g.N; ++j) {
      float acc = 0.f;
      for (int k = 0; k < g.K; ++k) {
        const float a = g.trans_a ? g.A[static_cast<size_t>(k) * g.lda + i] : g.A[static_cast<size_t>(i) * g.lda + k];
        const float b = g.trans_b ? g.B[static_cast<size_t>(j) * g.ldb + k] : g.B[static_cast<size_t>(k) * g.ldb + j];
        acc += a * b;
      }
      float& c = g.C[static_cast<size_t>(i) * g.ldc + j];
      c = g.alpha * acc + (g.beta == 0.f ? 0.f : g.beta * c);
    }
  }
}

GemmRowsFn select() {
  switch (active_isa()) {
#if QKV_ISA_AVX512
    case Isa::AVX512: return &gemm_rows<xsimd::avx512f>;
#endif
#if QKV_ISA_AVX2
    case Isa::AVX2: return &gemm_rows<xsimd::fma3<xsimd::avx2>>;
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return &gemm_rows<xsimd::sse4_1>;
#endif
#if QKV_ISA_NEON
    case Isa::NEON: return &gemm_rows<xsimd::neon64>;
#endif
    default: return &gemm_rows_scalar;
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  check(!(trans_a && trans_b), "gemm: trans_a && trans_b is not supported");
  if (M <= 0 || N <= 0) return;
  const GemmArgs g{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  const GemmRowsFn rows = select();
  // Blocks of 4 rows (the micro-kernel's height); small products stay on one thread.
  const int64_t blocks = (M + 3) / 4;
  const bool small = static_cast<int64_t>(M) * N * std::max(K, 1) < 32 * 1024;
  if (small) {
    rows(g, 0, M);
    return;
  }
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    rows(g, static_cast<int>(b0 * 4), static_cast<int>(std::min<int64_t>(b1 * 4, M)));
  });
}

void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  check(!(trans_a && trans_b), "gemm: trans_a && trans_b is not supported");
  gemm_rows_scalar({trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc}, 0, M);
}

}  // namespace qkv::kernels
