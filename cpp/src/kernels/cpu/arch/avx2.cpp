// Instantiates the SIMD kernel bodies for xsimd::fma3<xsimd::avx2>; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them.
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::fma3<xsimd::avx2>>(bool);
template GemmRowKernels gemm_row_kernels<xsimd::fma3<xsimd::avx2>>();
template void attention_softmax_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, float*, float*, float*);
template void attention_probs_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, const float*);
template void attention_dscores_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, float*, const float*);
template void attention_delta_rows<xsimd::fma3<xsimd::avx2>>(float*, const float*, const float*, int, int, int);
}  // namespace qkv::kernels

// The row-wise kernels (layernorm, bias + activation, cross-entropy, adam): their table for this set.
#include "kernels/cpu/rowwise_simd.h"
namespace qkv::kernels {
template const RowwiseKernels& rowwise_kernels_for<xsimd::fma3<xsimd::avx2>>();
}  // namespace qkv::kernels

// The product with quantized weights (gemm_quant): its row kernels and dequantization for this set.
#include "kernels/cpu/gemm_quant_simd.h"
namespace qkv::kernels {
// F16C (vcvtph2ps): every CPU with AVX2 and FMA3 has it (it came before both), so the AVX2 unit is built with
// -mf16c (cpp/CMakeLists.txt) and picked by the same check.
namespace quant_detail {
template <>
struct HalfLoader<xsimd::fma3<xsimd::avx2>> {
  static constexpr int order = 1;
  static void load(const uint8_t* p, xsimd::batch<float, xsimd::fma3<xsimd::avx2>>* w) {
    w[0] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    w[1] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
};
// vpmovsxbd ymm, [mem]: 8 consecutive int8 codes per vector, natural order (Int8Loader).
template <>
struct Int8Loader<xsimd::fma3<xsimd::avx2>> {
  static constexpr int order = 1;
  static xsimd::batch<float, xsimd::fma3<xsimd::avx2>> load1(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void load(const uint8_t* p, xsimd::batch<float, xsimd::fma3<xsimd::avx2>>* w) {
    for (int t = 0; t < 4; ++t) w[t] = load1(p + 8 * t);
  }
};
// A full-width interleave of two vectors: the in-lane unpacks, then their 128-bit halves put in order.
template <>
struct Zip<xsimd::fma3<xsimd::avx2>> {
  using F = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
  static void zip(const F& a, const F& b, F& lo, F& hi) {
    const __m256 l = _mm256_unpacklo_ps(a, b), h = _mm256_unpackhi_ps(a, b);  // (a0 b0 a1 b1 | a4 b4 a5 b5), ...
    lo = _mm256_permute2f128_ps(l, h, 0x20);
    hi = _mm256_permute2f128_ps(l, h, 0x31);
  }
};
}  // namespace quant_detail
template QuantKernels quant_kernels<xsimd::fma3<xsimd::avx2>>();
}  // namespace qkv::kernels

// The int8-activation product (gemm_quant_dot.h) on 256-bit vectors: int8 weights as int16 (vpmovsxbw) through
// vpmaddwd; Q4 four blocks at a time (gemm_quant_dot_simd.h: rows_q4_fours) with its codes unsigned, multiplied as
// bytes by vpmaddubsw.
#include "kernels/cpu/gemm_quant_dot_simd.h"
namespace qkv::kernels {
namespace {
struct Avx2Dot {
  using I = __m256i;
  using F = __m256;
  static constexpr int E = 16;
  static I load16(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I int8(const uint8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I madd(I a, I b) { return _mm256_madd_epi16(a, b); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static F scale(float s, I x, F acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(x), _mm256_set1_ps(s), acc); }
  static F zero() { return _mm256_setzero_ps(); }
  static float hsum(F v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  }
  // Q4: a block's 16 bytes as 32 codes, the low nibbles (the even elements) then the high ones, the order
  // quantize_activations puts a Q4 block's int8 activations in (Int8Rows' q8).
  using Codes = __m256i;
  static Codes q4_codes(const uint8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), mask = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
  }
  using Act = int8_t;
  static const Act* q4_act(const Int8Rows& a) { return a.q8; }
  // vpmaddubsw takes the codes (0..15) as its unsigned operand and the activations as its signed one, 32 products
  // summed in pairs (|pair| <= 2 * 15 * 127: no saturation), then vpmaddwd adds the pairs into 8 int32 lanes.
  static I q4_sum(const Codes& w, const int8_t* a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                             _mm256_set1_epi16(1));
  }
  // vphaddd adds neighbouring lanes within each 128-bit half: [x y] -> per half (x01, x23, y01, y23); a second
  // round over two such pairs leaves each block's sum split over the halves, which one add joins: lanes 0..3.
  static I reduce2(I x, I y) { return _mm256_hadd_epi32(x, y); }
  static I combine2(I p, I q) {
    const __m256i h = _mm256_hadd_epi32(p, q);
    return _mm256_zextsi128_si256(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
  }
  static F scales4(const uint16_t* s16, const float* d) {
    const __m128i bits = _mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s16))), 16);
    return _mm256_zextps128_ps256(_mm_mul_ps(_mm_castsi128_ps(bits), _mm_loadu_ps(d)));
  }
  static I sub(I x, I y) { return _mm256_sub_epi32(x, y); }
  static I load4(const int32_t* p) {
    return _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I lane0(int32_t x) { return _mm256_zextsi128_si256(_mm_cvtsi32_si128(x)); }
  static F scale4(I x, F s, F acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(x), s, acc); }
};
}  // namespace
void quant_dot_rows_avx2(const QuantDotRows& q, int n0, int n1) { dot_detail::rows_fn<Avx2Dot>(q, n0, n1); }
}  // namespace qkv::kernels
