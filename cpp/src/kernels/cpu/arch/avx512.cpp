// Instantiates the SIMD kernel bodies for xsimd::avx512f; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them.
// GCC 12.2's avx512fintrin.h trips its own -W(maybe-)uninitialized once intrinsics built on
// _mm512_undefined_* (max, roundscale, cvtt, shifts: xsimd's exp) are inlined (GCC bug 105593, fixed in
// 12.3): the warning is about that header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::avx512f>(bool);
template GemmRowKernels gemm_row_kernels<xsimd::avx512f>();
template void attention_softmax_rows<xsimd::avx512f>(const AttentionTile&, float*, float*, float*);
template void attention_probs_rows<xsimd::avx512f>(const AttentionTile&, const float*);
template void attention_dscores_rows<xsimd::avx512f>(const AttentionTile&, float*, const float*);
template void attention_delta_rows<xsimd::avx512f>(float*, const float*, const float*, int, int, int);
}  // namespace qkv::kernels

// The row-wise kernels (layernorm, bias + activation, cross-entropy, adam): their table for this set.
#include "kernels/cpu/rowwise_simd.h"
namespace qkv::kernels {
template const RowwiseKernels& rowwise_kernels_for<xsimd::avx512f>();
}  // namespace qkv::kernels

// The product with quantized weights (gemm_quant): its row kernels and dequantization for this set.
#include "kernels/cpu/gemm_quant_simd.h"
namespace qkv::kernels {
// AVX-512F converts halves itself (vcvtph2ps zmm).
namespace quant_detail {
template <>
struct HalfLoader<xsimd::avx512f> {
  static constexpr int order = 1;
  static void load(const uint8_t* p, xsimd::batch<float, xsimd::avx512f>* w) {
    w[0] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    w[1] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
};
template <>
struct Int8Loader<xsimd::avx512f> {
  static constexpr int order = 1;
  static xsimd::batch<float, xsimd::avx512f> load1(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void load(const uint8_t* p, xsimd::batch<float, xsimd::avx512f>* w) {
    for (int t = 0; t < 4; ++t) w[t] = load1(p + 16 * t);
  }
};
// Q4: each nibble looked up in a table of the 16 codes less 8 (vpermps takes the low 4 bits of each lane as its index,
// so a nibble needs no mask: a shift puts it at the bottom of its word and the bits above it are ignored).
template <>
struct Q4Loader<xsimd::avx512f> {
  using F = xsimd::batch<float, xsimd::avx512f>;
  static constexpr int order = 8;
  static constexpr bool kLookup = true;
  static __m512 table() { return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7); }
  // 64 bytes (4 groups) as the 8 vectors of codes less 8 in block order: vector t, lane i = nibble t of word i.
  static void codes(const uint8_t* p, F* w) {
    const __m512i v = _mm512_loadu_si512(p);
    const __m512 t = table();
    w[0] = _mm512_permutexvar_ps(v, t);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
    w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), t);
    w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), t);
    w[4] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 16), t);
    w[5] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 20), t);
    w[6] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 24), t);
    w[7] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 28), t);
  }
  // The 4 groups' scales (floats, row_scales below) each in the 4 lanes of its group: one permute.
  static F scales(const float* sf) {
    const __m512i group = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(group, _mm512_castps128_ps512(_mm_loadu_ps(sf)));
  }
  // One group of 32 in natural order, dequantized (its scale s folded into the table: each element the one rounding
  // of dequantize_element): lane i of the 16 bytes' zero-extension holds elements 2i (low nibble) and 2i + 1, and
  // one two-source permute per half puts them back in order. For the dequantized panels and a row's last groups.
  static void group(const uint8_t* p, float s, F* w) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512 t = _mm512_mul_ps(table(), _mm512_set1_ps(s));
    const __m512 even = _mm512_permutexvar_ps(v, t), odd = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    w[0] = _mm512_permutex2var_ps(even, low, odd);
    w[1] = _mm512_permutex2var_ps(even, _mm512_add_epi32(low, _mm512_set1_epi32(8)), odd);
  }
  // out[j] = the sum of v_j's lanes for 4 vectors at once: pairs of lanes added within each 128-bit quarter
  // (unpack), then the two pairs' halves (shuffle), leaving quarter q = (v0 v1 v2 v3)'s partial sums; the quarters
  // added last.
  static void sum4(F v0, F v1, F v2, F v3, float* out) {
    const __m512 a01 = _mm512_add_ps(_mm512_unpacklo_ps(v0, v1), _mm512_unpackhi_ps(v0, v1));
    const __m512 a23 = _mm512_add_ps(_mm512_unpacklo_ps(v2, v3), _mm512_unpackhi_ps(v2, v3));
    const __m512 q = _mm512_add_ps(_mm512_shuffle_ps(a01, a23, 0x44), _mm512_shuffle_ps(a01, a23, 0xee));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(q), _mm512_extractf32x8_ps(q, 1));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
  // A row's group scales (bfloat16, ops/weight_format.h) as floats in out: 16 at a time widened and shifted into
  // a float's top half, then one by one. Decoding's rows are short (K / 32 groups of a few operations each), so the
  // row's conversion must be a few operations: a generic loop over each row (Q4RowScales::of, with IEEE half scales
  // then) cost 9% of decoding.
  static const float* row_scales(const float* words, int K, float* out) {
    const int G = ops::q4_groups(K);
    const auto* halves = reinterpret_cast<const unsigned char*>(words);
    int g = 0;
    for (; g + 16 <= G; g += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(halves + 2 * g));
      _mm512_storeu_si512(out + g, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    // Eight more at once (K = 768 has 24 groups: a 16 and an 8; one by one, the 8 took GPT-2's fc1 product, 3072 x
    // 768 in cache on 1 thread, 60.4 us against 56.7-58.5)
    for (; g + 8 <= G; g += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + 2 * g));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + g), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    for (; g < G; ++g) out[g] = ops::q4_scale(words, g);
    return out;
  }
};
// A full-width interleave of two vectors: one two-source permute each half (vpermt2ps).
template <>
struct Zip<xsimd::avx512f> {
  using F = xsimd::batch<float, xsimd::avx512f>;
  static void zip(const F& a, const F& b, F& lo, F& hi) {
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    lo = _mm512_permutex2var_ps(a, low, b);
    hi = _mm512_permutex2var_ps(a, _mm512_add_epi32(low, _mm512_set1_epi32(8)), b);
  }
};
}  // namespace quant_detail
template QuantKernels quant_kernels<xsimd::avx512f>();
}  // namespace qkv::kernels
