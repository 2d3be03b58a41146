#pragma once
// The SIMD body of the matrix product, written once over xsimd::batch<float, Arch> and instantiated per
// instruction set in kernels/cpu/arch/<isa>.cpp (each compiled with that set's flags). Only those files
// include this header; gemm.cpp sees the declarations in gemm_rows.h.
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/gemm_rows.h"

namespace qkv::kernels {

template <class Arch>
void gemm_rows(const GemmArgs& g, int i0, int i1) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  const int N = g.N, K = g.K;

  for (int i = i0; i < i1; ++i) {
    float* c = g.C + static_cast<size_t>(i) * g.ldc;
    if (g.beta == 0.f) {
      for (int j = 0; j < N; ++j) c[j] = 0.f;
    } else if (g.beta != 1.f) {
      for (int j = 0; j < N; ++j) c[j] *= g.beta;
    }
  }

  if (!g.trans_b) {
    // C[i,:] += alpha * A(i,k) * B[k,:]: broadcast one A value, stream a row of B. Four rows of C at a
    // time share each load of B; N is cut into blocks so the four C row blocks stay in L1.
    auto a_at = [&](int i, int k) {
      return g.trans_a ? g.A[static_cast<size_t>(k) * g.lda + i] : g.A[static_cast<size_t>(i) * g.lda + k];
    };
    constexpr int NB = 512;
    int i = i0;
    for (; i + 4 <= i1; i += 4) {
      float* c0 = g.C + static_cast<size_t>(i) * g.ldc;
      float* c1 = c0 + g.ldc;
      float* c2 = c1 + g.ldc;
      float* c3 = c2 + g.ldc;
      for (int j0 = 0; j0 < N; j0 += NB) {
        const int j1 = j0 + NB < N ? j0 + NB : N;
        for (int k = 0; k < K; ++k) {
          const float a0 = g.alpha * a_at(i, k), a1 = g.alpha * a_at(i + 1, k);
          const float a2 = g.alpha * a_at(i + 2, k), a3 = g.alpha * a_at(i + 3, k);
          const V va0(a0), va1(a1), va2(a2), va3(a3);
          const float* b = g.B + static_cast<size_t>(k) * g.ldb;
          int j = j0;
          for (; j + W <= j1; j += W) {
            const V vb = V::load_unaligned(b + j);
            xsimd::fma(va0, vb, V::load_unaligned(c0 + j)).store_unaligned(c0 + j);
            xsimd::fma(va1, vb, V::load_unaligned(c1 + j)).store_unaligned(c1 + j);
            xsimd::fma(va2, vb, V::load_unaligned(c2 + j)).store_unaligned(c2 + j);
            xsimd::fma(va3, vb, V::load_unaligned(c3 + j)).store_unaligned(c3 + j);
          }
          for (; j < j1; ++j) {
            c0[j] += a0 * b[j];
            c1[j] += a1 * b[j];
            c2[j] += a2 * b[j];
            c3[j] += a3 * b[j];
          }
        }
      }
    }
    for (; i < i1; ++i) {
      float* c0 = g.C + static_cast<size_t>(i) * g.ldc;
      for (int k = 0; k < K; ++k) {
        const float a0 = g.alpha * a_at(i, k);
        const V va0(a0);
        const float* b = g.B + static_cast<size_t>(k) * g.ldb;
        int j = 0;
        for (; j + W <= N; j += W)
          xsimd::fma(va0, V::load_unaligned(b + j), V::load_unaligned(c0 + j)).store_unaligned(c0 + j);
        for (; j < N; ++j) c0[j] += a0 * b[j];
      }
    }
    return;
  }

  // trans_b (and not trans_a): C[i,j] += alpha * dot(A[i,:], B[j,:]) with both rows contiguous over K.
  // Four columns of C at a time share each load of A's row.
  for (int i = i0; i < i1; ++i) {
    const float* a = g.A + static_cast<size_t>(i) * g.lda;
    float* c = g.C + static_cast<size_t>(i) * g.ldc;
    int j = 0;
    for (; j + 4 <= N; j += 4) {
      const float* b0 = g.B + static_cast<size_t>(j) * g.ldb;
      const float* b1 = b0 + g.ldb;
      const float* b2 = b1 + g.ldb;
      const float* b3 = b2 + g.ldb;
      V s0(0.f), s1(0.f), s2(0.f), s3(0.f);
      int k = 0;
      for (; k + W <= K; k += W) {
        const V va = V::load_unaligned(a + k);
        s0 = xsimd::fma(va, V::load_unaligned(b0 + k), s0);
        s1 = xsimd::fma(va, V::load_unaligned(b1 + k), s1);
        s2 = xsimd::fma(va, V::load_unaligned(b2 + k), s2);
        s3 = xsimd::fma(va, V::load_unaligned(b3 + k), s3);
      }
      float d0 = xsimd::hadd(s0), d1 = xsimd::hadd(s1), d2 = xsimd::hadd(s2), d3 = xsimd::hadd(s3);
      for (; k < K; ++k) {
        d0 += a[k] * b0[k];
        d1 += a[k] * b1[k];
        d2 += a[k] * b2[k];
        d3 += a[k] * b3[k];
      }
      c[j] += g.alpha * d0;
      c[j + 1] += g.alpha * d1;
      c[j + 2] += g.alpha * d2;
      c[j + 3] += g.alpha * d3;
    }
    for (; j < N; ++j) {
      const float* b0 = g.B + static_cast<size_t>(j) * g.ldb;
      V s0(0.f);
      int k = 0;
      for (; k + W <= K; k += W) s0 = xsimd::fma(V::load_unaligned(a + k), V::load_unaligned(b0 + k), s0);
      float d0 = xsimd::hadd(s0);
      for (; k < K; ++k) d0 += a[k] * b0[k];
      c[j] += g.alpha * d0;
    }
  }
}

}  // namespace qkv::kernels
