#pragma once
// The SIMD micro-kernel of the matrix product, written once over xsimd::batch<float, Arch> and instantiated
// per instruction set in kernels/cpu/arch/<isa>.cpp (each compiled with that set's flags). Only those files
// include this header; gemm.cpp sees the declarations in gemm_kernel.h.
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/gemm_kernel.h"

namespace qkv::kernels {

// The register tile is MR rows by 2 vectors of C: 2*MR accumulators, 2 vectors of b and one broadcast of a
// live at once. Each k step does 2 loads of b, MR broadcasts of a and 2*MR FMAs, so the FMA units, not the
// loads, bound it. MR per register file: 32 vector registers (AVX-512, NEON) take MR = 8 (16 accumulators,
// and 8 divides the batch x context row counts the models use, where 12 would leave ragged panels);
// 16 registers (AVX2, SSE, and SIMD128 as V8 maps it onto x86) take MR = 6 (12 accumulators), which still
// covers FMA latency x throughput (4 cycles x 2 ports = 8 in flight).
template <class Arch>
constexpr int gemm_mr() {
  if constexpr (std::is_same_v<Arch, xsimd::avx512f> || std::is_same_v<Arch, xsimd::neon64>) return 8;
  return 6;
}

template <class Arch>
void gemm_micro(int kc, const float* a, const float* b, int ldb, float* c, int ldc, float alpha, float beta) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  constexpr int MR = gemm_mr<Arch>();
  V acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc0[r] = acc1[r] = V(0.f);
  for (int k = 0; k < kc; ++k) {
    const V b0 = V::load_unaligned(b), b1 = V::load_unaligned(b + W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V ar(a[r]);
      acc0[r] = xsimd::fma(ar, b0, acc0[r]);
      acc1[r] = xsimd::fma(ar, b1, acc1[r]);
    }
    a += MR;
    b += ldb;
  }
  const V va(alpha);
  if (beta == 0.f) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      float* cr = c + static_cast<size_t>(r) * ldc;
      (va * acc0[r]).store_unaligned(cr);
      (va * acc1[r]).store_unaligned(cr + W);
    }
  } else {
    // beta == 1 is the common case (the later K blocks, gradient accumulation): one FMA per vector, and
    // bit-identical to alpha * acc + 1 * c.
    const V vb(beta);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      float* cr = c + static_cast<size_t>(r) * ldc;
      const V c0 = beta == 1.f ? V::load_unaligned(cr) : vb * V::load_unaligned(cr);
      const V c1 = beta == 1.f ? V::load_unaligned(cr + W) : vb * V::load_unaligned(cr + W);
      xsimd::fma(va, acc0[r], c0).store_unaligned(cr);
      xsimd::fma(va, acc1[r], c1).store_unaligned(cr + W);
    }
  }
}

template <class Arch>
GemmMicroKernel gemm_micro_kernel() {
  return {gemm_mr<Arch>(), 2 * static_cast<int>(xsimd::batch<float, Arch>::size), &gemm_micro<Arch>};
}

}  // namespace qkv::kernels
