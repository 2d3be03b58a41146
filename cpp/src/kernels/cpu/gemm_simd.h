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
    // C[i,:] += alpha * sum_k A(i,k) * B[k,:]. Register tile: 4 rows x 2 vectors of C held in 8 accumulators
    // over the whole K loop (C is read and written once per tile, not once per k); each B load serves 4
    // rows and each broadcast A value 2 vectors. Column tails use 1 vector, then scalars.
    auto a_at = [&](int i, int k) {
      return g.trans_a ? g.A[static_cast<size_t>(k) * g.lda + i] : g.A[static_cast<size_t>(i) * g.lda + k];
    };
    const V alpha(g.alpha);
    int i = i0;
    for (; i + 4 <= i1; i += 4) {
      float* c0 = g.C + static_cast<size_t>(i) * g.ldc;
      float* c1 = c0 + g.ldc;
      float* c2 = c1 + g.ldc;
      float* c3 = c2 + g.ldc;
      int j = 0;
      for (; j + 2 * W <= N; j += 2 * W) {
        V s00(0.f), s01(0.f), s10(0.f), s11(0.f), s20(0.f), s21(0.f), s30(0.f), s31(0.f);
        for (int k = 0; k < K; ++k) {
          const float* b = g.B + static_cast<size_t>(k) * g.ldb + j;
          const V b0 = V::load_unaligned(b), b1 = V::load_unaligned(b + W);
          const V a0(a_at(i, k)), a1(a_at(i + 1, k)), a2(a_at(i + 2, k)), a3(a_at(i + 3, k));
          s00 = xsimd::fma(a0, b0, s00);
          s01 = xsimd::fma(a0, b1, s01);
          s10 = xsimd::fma(a1, b0, s10);
          s11 = xsimd::fma(a1, b1, s11);
          s20 = xsimd::fma(a2, b0, s20);
          s21 = xsimd::fma(a2, b1, s21);
          s30 = xsimd::fma(a3, b0, s30);
          s31 = xsimd::fma(a3, b1, s31);
        }
        xsimd::fma(alpha, s00, V::load_unaligned(c0 + j)).store_unaligned(c0 + j);
        xsimd::fma(alpha, s01, V::load_unaligned(c0 + j + W)).store_unaligned(c0 + j + W);
        xsimd::fma(alpha, s10, V::load_unaligned(c1 + j)).store_unaligned(c1 + j);
        xsimd::fma(alpha, s11, V::load_unaligned(c1 + j + W)).store_unaligned(c1 + j + W);
        xsimd::fma(alpha, s20, V::load_unaligned(c2 + j)).store_unaligned(c2 + j);
        xsimd::fma(alpha, s21, V::load_unaligned(c2 + j + W)).store_unaligned(c2 + j + W);
        xsimd::fma(alpha, s30, V::load_unaligned(c3 + j)).store_unaligned(c3 + j);
        xsimd::fma(alpha, s31, V::load_unaligned(c3 + j + W)).store_unaligned(c3 + j + W);
      }
      for (; j + W <= N; j += W) {
        V s0(0.f), s1(0.f), s2(0.f), s3(0.f);
        for (int k = 0; k < K; ++k) {
          const V b0 = V::load_unaligned(g.B + static_cast<size_t>(k) * g.ldb + j);
          s0 = xsimd::fma(V(a_at(i, k)), b0, s0);
          s1 = xsimd::fma(V(a_at(i + 1, k)), b0, s1);
          s2 = xsimd::fma(V(a_at(i + 2, k)), b0, s2);
          s3 = xsimd::fma(V(a_at(i + 3, k)), b0, s3);
        }
        xsimd::fma(alpha, s0, V::load_unaligned(c0 + j)).store_unaligned(c0 + j);
        xsimd::fma(alpha, s1, V::load_unaligned(c1 + j)).store_unaligned(c1 + j);
        xsimd::fma(alpha, s2, V::load_unaligned(c2 + j)).store_unaligned(c2 + j);
        xsimd::fma(alpha, s3, V::load_unaligned(c3 + j)).store_unaligned(c3 + j);
      }
      for (; j < N; ++j) {
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        for (int k = 0; k < K; ++k) {
          const float b = g.B[static_cast<size_t>(k) * g.ldb + j];
          s0 += a_at(i, k) * b;
          s1 += a_at(i + 1, k) * b;
          s2 += a_at(i + 2, k) * b;
          s3 += a_at(i + 3, k) * b;
        }
        c0[j] += g.alpha * s0;
        c1[j] += g.alpha * s1;
        c2[j] += g.alpha * s2;
        c3[j] += g.alpha * s3;
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
