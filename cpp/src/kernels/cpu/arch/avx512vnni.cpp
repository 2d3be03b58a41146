// The products with int8 activations (gemm_quant_dot.h) on AVX-512 VNNI: vpdpbusd multiplies 64 unsigned bytes by
// 64 int8 activations and adds them in fours into 16 int32 lanes, two blocks of 32 at once. This file alone is
// compiled with AVX-512 BW + VNNI (cpp/CMakeLists.txt); gemm_quant.cpp picks it on an AVX-512 machine whose CPU has
// VNNI.
//
// Per pair of blocks b, b + 1 (32 bytes of codes, 64 activations, which Int8Rows keeps contiguous for a row of A):
// the nibbles become [even codes of b | odd of b | even of b + 1 | odd of b + 1] (the activations' order), lanes
// 0-7 sum block b's 32 products and lanes 8-15 block b + 1's, less 8 x each block's activation sum (Int8Rows::zsum:
// sum (c - 8) q = sum c q - 8 sum q, exact in int32), then scaled by each block's s[n, b] d[m, b].
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_quant_dot.h"
#include "kernels/cpu/gemm_quant_kernel.h"

namespace qkv::kernels {
namespace {

// The blocks past the last whole pair are summed in scalar code from the int16 copy of the activations (Int8Rows::q):
// GCC 12 vectorizes a sum of int8 x int8 products in this unit (-mavx512vnni) into vpdpbusd, which reads one side as
// unsigned bytes, and the sums came out wrong (GemmQuantDot.EveryIsaMatchesTheOracleOverRaggedShapes, K = 32).

// The integer sum of a single Q4 block (an odd last one) with its activations in the nibbles' order.
int32_t one_block(const uint8_t* codes, const int16_t* a) {
  int32_t sum = 0;
  for (int i = 0; i < 16; ++i) sum += (codes[i] & 0xf) * a[i] + (codes[i] >> 4) * a[16 + i];
  return sum;
}

// Two consecutive 32-bit values (floats or ints) spread over a vector: p[0] in lanes 0-7 (block b's), p[1] in lanes
// 8-15 (block b + 1's).
inline __m512i spread_pair(const void* p) {
  const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_epi32(halves, _mm512_castsi128_si512(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
}

// The two bfloat16 scales of a word (blocks b and b + 1 of a Q4 row, ops/weight_format.h) as spread_pair spreads
// two floats: block b's is the word shifted up 16, block b + 1's the word's top half, so the row's scales need no
// pass of their own.
inline __m512 spread_scales(const float* word) {
  int32_t w;
  std::memcpy(&w, word, sizeof w);
  const __m512i lo = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(w) << 16));
  const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(w) & 0xffff0000u));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(0xff00, lo, hi));
}

// The exact integer sums of blocks b and b + 1 of a row of A (at `block` = m * nb + b) with 64 weight codes as
// unsigned bytes: lanes 0-7 add up to block b's, lanes 8-15 to block b + 1's, each less its offset (zsum, taken off
// lanes 0 and 8).
inline __m512i pair_sums(__m512i codes, const Int8Rows& a, size_t block) {
  const __m512i offsets = _mm512_maskz_mov_epi32(0x0101, spread_pair(a.zsum + block));
  const __m512i x = _mm512_loadu_si512(a.q8 + block * kDotBlock);
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, x), offsets);
}

template <int MR>
void rows(const QuantDotRows& q, int n0, int n1) {
  const int nb = q.a.nb, pairs = nb / 2;
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), nibble = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    const float* s = q.scales + static_cast<size_t>(n) * q.spr;  // the row's scale words: two bfloat16 each
    __m512 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
    for (int p = 0; p < pairs; ++p) {
      const int b = 2 * p;
      // The 32 bytes' 64-bit quarters [v0 v0 v1 v1] (v0: block b's 16 bytes, v1: block b + 1's), the second copy of
      // each shifted down a nibble, then masked: [lo b | hi b | lo b+1 | hi b+1], the activations' order.
      const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 16)));
      const __m512i codes = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi64(spread, v), nibble), mask);
      const __m512 sw = spread_scales(s + p);  // blocks b and b + 1: the two scales of word b / 2 = p
      for (int m = 0; m < MR; ++m) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        const __m512 d = _mm512_castsi512_ps(spread_pair(q.a.d + block));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pair_sums(codes, q.a, block)), _mm512_mul_ps(sw, d), acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) {
      float c = _mm512_reduce_add_ps(acc[m]);
      if (nb % 2) {
        const int b = nb - 1;
        const size_t block = static_cast<size_t>(m) * nb + b;
        c += static_cast<float>(one_block(row + b * 16, q.a.q + block * kDotBlock) - q.a.zsum[block]) *
             (ops::q4_scale(s, b) * q.a.d[block]);
      }
      q.C[static_cast<size_t>(m) * q.ldc + n] = c;
    }
  }
}

// Int8 weights: 64 codes (two blocks) per vpdpbusd, made unsigned by flipping their sign bits (c ^ 0x80 = c + 128),
// the 128 x the activations' sums (Int8Rows::zsum) taken off; one scale per row, applied to the row's sum. Blocks
// past the last whole pair (one whole block, a partial one) are summed in scalar code, reading no byte past K.
template <int MR>
void rows_int8(const QuantDotRows& q, int n0, int n1) {
  const int nb = q.a.nb, pairs = q.a.K / (2 * kDotBlock);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    __m512 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
    for (int p = 0; p < pairs; ++p) {
      const int b = 2 * p;
      const __m512i codes = _mm512_xor_si512(_mm512_loadu_si512(row + b * kDotBlock), flip);
      for (int m = 0; m < MR; ++m) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        const __m512 d = _mm512_castsi512_ps(spread_pair(q.a.d + block));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pair_sums(codes, q.a, block)), d, acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) {
      float c = _mm512_reduce_add_ps(acc[m]);
      for (int b = 2 * pairs; b < nb; ++b) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        int32_t sum = 0;
        for (int k = b * kDotBlock; k < std::min(q.a.K, (b + 1) * kDotBlock); ++k)
          sum += static_cast<int8_t>(row[k]) * q.a.q[block * kDotBlock + (k - b * kDotBlock)];
        c += static_cast<float>(sum) * q.a.d[block];
      }
      q.C[static_cast<size_t>(m) * q.ldc + n] = c * q.scales[static_cast<size_t>(n) * q.spr];
    }
  }
}

}  // namespace

void quant_dot_rows_avx512vnni(const QuantDotRows& q, int n0, int n1) {
  const bool q4 = q.f == WeightFormat::Q4;
  switch (q.a.M) {
    case 1: return q4 ? rows<1>(q, n0, n1) : rows_int8<1>(q, n0, n1);
    case 2: return q4 ? rows<2>(q, n0, n1) : rows_int8<2>(q, n0, n1);
    case 3: return q4 ? rows<3>(q, n0, n1) : rows_int8<3>(q, n0, n1);
    default: return q4 ? rows<4>(q, n0, n1) : rows_int8<4>(q, n0, n1);
  }
}

}  // namespace qkv::kernels
