// The products with int8 activations (gemm_quant_dot.h) on AVX-512 VNNI: vpdpbusd multiplies 64 unsigned bytes by
// 64 int8 activations and adds them in fours into 16 int32 lanes. This file alone is compiled with AVX-512 BW + VNNI
// (cpp/CMakeLists.txt); gemm_quant.cpp picks it on an AVX-512 machine whose CPU has VNNI.
//
// Q4's kernel keeps each block's integer sum exact in int32 until 16 blocks' sums sit in one vector (block j in lane j,
// by halve), then scales those 16 at once: one convert and one FMA per 16 blocks, where scaling each vpdpbusd's lanes
// as they came (the blocks' scales spread over them, an FMA chain per row) cost about twice the instructions.
// Measured on the 2-core AMD EPYC (Zen 5, in-cache GPT-2 shapes, `qkv_bench gemm-quant --quick`, 1 thread): q4a8
// fc1 (3072 x 768) 48.7 -> 33.6 us, fc2 (768 x 3072) 46.6 -> 27.3 us. Int8's kernel scales each pair as it comes:
// the same reduction there (a pair of blocks is one vpdpbusd, so 8 pairs to reduce, not 4 groups) was slower at
// K = 768 (fc1 37.6 -> 44.1 us; its 12 pairs fill 16 slots) and 7% faster at K = 3072.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_quant_dot.h"
#include "kernels/cpu/gemm_quant_kernel.h"

namespace qkv::kernels {
namespace {

// The blocks past the last whole group (Q4) or pair (int8) are summed in scalar code from the int16 copy of the
// activations (Int8Rows::q): GCC 12 vectorizes a sum of int8 x int8 products in this unit (-mavx512vnni) into vpdpbusd,
// which reads one side as unsigned bytes, and the sums came out wrong
// (GemmQuantDot.EveryIsaMatchesTheOracleOverRaggedShapes, K = 32).

// The integer sum of a single Q4 block (one past the last whole group) with its activations in the nibbles' order.
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

// The exact integer sums of blocks b and b + 1 of a row of A (at `block` = m * nb + b) with 64 weight codes as
// unsigned bytes: lanes 0-7 add up to block b's, lanes 8-15 to block b + 1's, each less its offset (zsum, taken off
// lanes 0 and 8).
inline __m512i pair_sums(__m512i codes, const Int8Rows& a, size_t block) {
  const __m512i offsets = _mm512_maskz_mov_epi32(0x0101, spread_pair(a.zsum + block));
  const __m512i x = _mm512_loadu_si512(a.q8 + block * kDotBlock);
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, x), offsets);
}

// Two vectors of partial sums, each lane group one block's, into one whose groups are half as wide: the groups' first
// halves (x's, then y's) plus their second halves. lo and hi are _mm512_permutex2var_epi32 indices (y's lanes 16-31).
inline __m512i halve(__m512i x, __m512i y, __m512i lo, __m512i hi) {
  return _mm512_add_epi32(_mm512_permutex2var_epi32(x, lo, y), _mm512_permutex2var_epi32(x, hi, y));
}

// The bfloat16 scales of `count` blocks (4, 8, 12 or 16) as floats in lanes 0 .. count - 1, zeros past them. Plain
// loads of 8, 16 or 24 bytes, not a masked one: a row's scales are a stream of their own beside its codes, and read by
// a masked load (vmovdqu16 with a mask) this kernel took 18% more of GPT-2 124M's q4a8 decode (perf's samples in the
// kernel, 300 tokens, 2 threads) than the pair-at-a-time kernel before it, with plain loads 12% less: the hardware
// prefetchers appear not to follow masked loads (the same loads ran at full speed in cache).
inline __m512 block_scales(const uint16_t* s, int count) {
  const __m128i first = count >= 8 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(s))
                                   : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  const __m128i second = count == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 8))
                         : count > 8 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 8))
                                     : _mm_setzero_si128();
  const __m256i bits = _mm256_inserti128_si256(_mm256_castsi128_si256(first), second, 1);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// Q4 weights, four blocks (64 bytes of codes, 128 weights) at a time. The bytes' low nibbles are the four blocks' even
// elements and their high nibbles the odd ones, in the order of the activations' bytes here (q4_group_order: the four
// blocks' even elements, then their odd ones), so a mask and a shift make two vectors of unsigned codes and two
// vpdpbusd leave each block's products summed in one group of four lanes (block 4g + i in lanes 4i .. 4i + 3). Four
// groups (16 blocks) then become one vector of the 16 blocks' integer sums, block j in lane j, by two rounds of halve
// (groups of 4 lanes -> 2 -> 1), and only that vector is made float: less each block's offset (8 x its activation sum,
// Int8Rows::zsum: sum (c - 8) q = sum c q - 8 sum q, exact in int32), times s[n, b] d[m, b] (the row's bfloat16 scales
// widened in block order, the activations' d as stored), one FMA into the row's accumulator. Against the kernel before
// it (pairs of blocks, each pair's two scales, d and offsets spread over its lanes, a convert and an FMA on one chain:
// about 21 instructions a pair), this takes about 5. Blocks past the last whole group are summed in scalar code.
template <int MR>
void rows(const QuantDotRows& q, int n0, int n1) {
  const int nb = q.a.nb, groups = nb / 4;
  const __m512i mask = _mm512_set1_epi8(0x0f);
  // halve's indices: groups of 4 lanes -> 2 (x's blocks, then y's), 2 -> 1
  const __m512i lo4 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
  const __m512i hi4 = _mm512_add_epi32(lo4, _mm512_set1_epi32(2));
  const __m512i lo2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i hi2 = _mm512_add_epi32(lo2, _mm512_set1_epi32(1));
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    const float* s = q.scales + static_cast<size_t>(n) * q.spr;  // the row's scale words: two bfloat16 each
    const uint16_t* s16 = reinterpret_cast<const uint16_t*>(s);  // block b's at s16[b] (ops/weight_format.h)
    __m512 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
    for (int g0 = 0; g0 < groups; g0 += 4) {
      // Group g's sums for every row of A (block 4g + i in lanes 4i .. 4i + 3), or zeros past the last group.
      auto dots = [&](int g, __m512i* out) {
        if (g >= groups) {
          for (int m = 0; m < MR; ++m) out[m] = _mm512_setzero_si512();
          return;
        }
        prefetch_weights(row + g * 64);
        const __m512i v = _mm512_loadu_si512(row + g * 64);
        const __m512i even = _mm512_and_si512(v, mask), odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
        for (int m = 0; m < MR; ++m) {
          const int8_t* x = q.a.q8 + (static_cast<size_t>(m) * nb + 4 * g) * kDotBlock;
          out[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even, _mm512_loadu_si512(x)), odd,
                                       _mm512_loadu_si512(x + 64));
        }
      };
      __m512i a[MR], b[MR], c[MR], d[MR];
      dots(g0, a);
      dots(g0 + 1, b);
      dots(g0 + 2, c);
      dots(g0 + 3, d);
      // Blocks 4 g0 .. 4 g0 + 15 of whole groups; the lanes past them are loaded as zeros.
      const int b0 = 4 * g0, count = 4 * std::min(4, groups - g0);
      const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
      const __m512 sw = block_scales(s16 + b0, count);
      for (int m = 0; m < MR; ++m) {
        const size_t block = static_cast<size_t>(m) * nb + b0;
        const __m512i sums = halve(halve(a[m], b[m], lo4, hi4), halve(c[m], d[m], lo4, hi4), lo2, hi2);
        const __m512i exact = _mm512_sub_epi32(sums, _mm512_maskz_loadu_epi32(valid, q.a.zsum + block));
        const __m512 scale = _mm512_mul_ps(sw, _mm512_maskz_loadu_ps(valid, q.a.d + block));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), scale, acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) {
      float c = _mm512_reduce_add_ps(acc[m]);
      for (int b = 4 * groups; b < nb; ++b) {
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
      prefetch_weights(row + b * kDotBlock);
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

void q4_group_order_avx512vnni(int8_t* q8, int M, int nb) {
  for (int m = 0; m < M; ++m) {
    int8_t* r = q8 + static_cast<size_t>(m) * nb * kDotBlock;
    for (int b = 0; b + 4 <= nb; b += 4) {
      // 128 bytes [E0 O0 E1 O1 | E2 O2 E3 O3] (Ei, Oi: block i's 16 even, 16 odd elements) -> [E0 E1 E2 E3 | O0 .. O3]
      int8_t* x = r + static_cast<size_t>(b) * kDotBlock;
      const __m512i lo = _mm512_loadu_si512(x), hi = _mm512_loadu_si512(x + 64);
      _mm512_storeu_si512(x, _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
      _mm512_storeu_si512(x + 64, _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
    }
  }
}

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
