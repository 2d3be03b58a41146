// Instantiates the SIMD kernel bodies for xsimd::sse4_1; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them. In the WebAssembly build these are the
// kernels that run, through Emscripten's SSE emulation: wasm_sse.h first replaces its slow conversions.
#include "kernels/cpu/wasm_sse.h"
// (wasm_sse.h must come before any xsimd header)
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::sse4_1>(bool);
template GemmRowKernels gemm_row_kernels<xsimd::sse4_1>();
template void attention_softmax_rows<xsimd::sse4_1>(const AttentionTile&, float*, float*, float*);
template void attention_probs_rows<xsimd::sse4_1>(const AttentionTile&, const float*);
template void attention_dscores_rows<xsimd::sse4_1>(const AttentionTile&, float*, const float*);
template void attention_delta_rows<xsimd::sse4_1>(float*, const float*, const float*, int, int, int);
}  // namespace qkv::kernels

// The row-wise kernels (layernorm, bias + activation, cross-entropy, adam): their table for this set.
#include "kernels/cpu/rowwise_simd.h"
namespace qkv::kernels {
template const RowwiseKernels& rowwise_kernels_for<xsimd::sse4_1>();
}  // namespace qkv::kernels

// The product with quantized weights (gemm_quant): its row kernels and dequantization for this set.
#include "kernels/cpu/gemm_quant_simd.h"
namespace qkv::kernels {
template QuantKernels quant_kernels<xsimd::sse4_1>();
}  // namespace qkv::kernels

// The int8-activation product (gemm_quant_dot.h) on 128-bit vectors. In the WebAssembly build the emulated SSE
// intrinsics map one to one onto SIMD128 (pmaddwd is i32x4.dot_i16x8_s), except where SIMD128 has a shorter way,
// written with its own intrinsics: a sign-extending 8-byte load (v128.load8x8_s) and a byte shift (i8x16.shr_u).
// The relaxed-SIMD build multiplies Q4's bytes directly: i16x8.relaxed_dot_i8x16_i7x16_s takes 16 products of an
// int8 activation and a code at once (the codes 0..15 fit its 7-bit operand, so every engine gives the exact sums;
// V8 on x86: one pmaddubsw), the recentring by 8 being the block's activation sum (Int8Rows::zsum).
#include "kernels/cpu/gemm_quant_dot_simd.h"
namespace qkv::kernels {
namespace {
struct Sse41Dot {
  using I = __m128i;
  using F = __m128;
  static constexpr int E = 8;
  static I load16(const int16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static I int8(const uint8_t* p) {
#ifdef __EMSCRIPTEN__
    return (I)wasm_i16x8_load8x8(p);
#else
    return _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#endif
  }
  static void q4(const uint8_t* p, I* w) {
    const I v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), eight = _mm_set1_epi8(8);
#ifdef __EMSCRIPTEN__
    const I lo = _mm_sub_epi8(_mm_and_si128(v, _mm_set1_epi8(0x0f)), eight);
    const I hi = _mm_sub_epi8((I)wasm_u8x16_shr((v128_t)v, 4), eight);
    w[0] = (I)wasm_i16x8_extend_low_i8x16((v128_t)lo);
    w[1] = (I)wasm_i16x8_extend_high_i8x16((v128_t)lo);
    w[2] = (I)wasm_i16x8_extend_low_i8x16((v128_t)hi);
    w[3] = (I)wasm_i16x8_extend_high_i8x16((v128_t)hi);
#else
    const I mask = _mm_set1_epi8(0x0f);
    const I lo = _mm_sub_epi8(_mm_and_si128(v, mask), eight);
    const I hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), mask), eight);
    w[0] = _mm_cvtepi8_epi16(lo);
    w[1] = _mm_cvtepi8_epi16(_mm_srli_si128(lo, 8));
    w[2] = _mm_cvtepi8_epi16(hi);
    w[3] = _mm_cvtepi8_epi16(_mm_srli_si128(hi, 8));
#endif
  }
  static I madd(I a, I b) { return _mm_madd_epi16(a, b); }
  static I add(I a, I b) { return _mm_add_epi32(a, b); }
  static F scale(float s, I x, F acc) { return _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(x), _mm_set1_ps(s))); }
  static F zero() { return _mm_setzero_ps(); }
  static float hsum(F v) {
    const F h = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  }
#if defined(__EMSCRIPTEN__) && defined(QKV_WASM_RELAXED_SIMD)
  static constexpr bool kQ4Bytes = true;
  struct Nibbles {
    v128_t lo, hi;  // the even elements' codes, the odd ones'
  };
  static Nibbles q4_nibbles(const uint8_t* p) {
    const v128_t v = wasm_v128_load(p);
    return {wasm_v128_and(v, wasm_i8x16_splat(0x0f)), wasm_u8x16_shr(v, 4)};
  }
  // Lane i = a[2i] b[2i] + a[2i+1] b[2i+1] (int8 a, 7-bit b): i16x8.relaxed_dot_i8x16_i7x16_s, written as clang 14's
  // prototype i8x16.relaxed_swizzle, which scripts/wasm-relaxed.mjs rewrites into it after linking (clang 14 has no
  // dot). Here |lane| <= 2 * 127 * 15 = 3810.
  static v128_t dot(v128_t a, v128_t b) { return (v128_t)__builtin_wasm_relaxed_swizzle_i8x16((__i8x16)a, (__i8x16)b); }
  // The two halves' dots added in 16 bits (|lane| <= 7620), widened in pairs, less 8 x the activations' sum.
  static I q4_dot(const Nibbles& w, const int8_t* a, int32_t zsum) {
    const v128_t d = wasm_i16x8_add(dot(wasm_v128_load(a), w.lo), dot(wasm_v128_load(a + 16), w.hi));
    return (I)wasm_i32x4_sub(wasm_i32x4_extadd_pairwise_i16x8(d), wasm_i32x4_make(zsum, 0, 0, 0));
  }
#else
  static constexpr bool kQ4Bytes = false;
#endif
};
}  // namespace
#if defined(__EMSCRIPTEN__) && defined(QKV_WASM_RELAXED_SIMD)
extern const bool kQuantDotBytes = true;
#else
extern const bool kQuantDotBytes = false;
#endif
void quant_dot_rows_sse41(const QuantDotRows& q, int n0, int n1) { dot_detail::rows_fn<Sse41Dot>(q, n0, n1); }
}  // namespace qkv::kernels
