// Instantiates the SIMD kernel bodies for xsimd::sse4_1; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them. In the WebAssembly build these are the
// kernels that run, through Emscripten's SSE emulation: wasm_sse.h first replaces its slow conversions.
#include "kernels/cpu/wasm_sse.h"
// (wasm_sse.h must come before any xsimd header)
#include <cmath>

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
// written with its own intrinsics: a sign-extending 8-byte load (v128.load8x8_s).
// Q4 goes four blocks at a time (gemm_quant_dot_simd.h: rows_q4_fours) with its codes unsigned, 0..15, the
// recentring by 8 being the blocks' activation sums (Int8Rows::zsum). The plain build takes the codes out of 16-bit
// lanes, already int16, for pmaddwd (the activations put in that order per call: q4_prepare_sse41); the
// relaxed-SIMD build multiplies the bytes directly: i16x8.relaxed_dot_i8x16_i7x16_s takes 16 products of
// an int8 activation and a code at once (the codes fit its 7-bit operand, so every engine gives the exact sums; V8 on
// x86: one pmaddubsw).
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
  static I madd(I a, I b) { return _mm_madd_epi16(a, b); }
  static I add(I a, I b) { return _mm_add_epi32(a, b); }
  static F scale(float s, I x, F acc) { return _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(x), _mm_set1_ps(s))); }
  static F zero() { return _mm_setzero_ps(); }
  static float hsum(F v) {
    const F h = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  }
#if defined(__EMSCRIPTEN__) && defined(QKV_WASM_RELAXED_SIMD)
  struct Nibbles {
    v128_t lo, hi;  // the even elements' codes, the odd ones'
  };
  // Lane i = a[2i] b[2i] + a[2i+1] b[2i+1] (int8 a, 7-bit b): i16x8.relaxed_dot_i8x16_i7x16_s, written as clang 14's
  // prototype i8x16.relaxed_swizzle, which scripts/wasm-relaxed.mjs rewrites into it after linking (clang 14 has no
  // dot). Here |lane| <= 2 * 127 * 15 = 3810, and the two halves' sum fits 16 bits too (7620).
  static v128_t dot(v128_t a, v128_t b) { return (v128_t)__builtin_wasm_relaxed_swizzle_i8x16((__i8x16)a, (__i8x16)b); }
#endif
  // Q4 four blocks at a time (gemm_quant_dot_simd.h: rows_q4_fours), the codes unsigned.
#if defined(__EMSCRIPTEN__) && defined(QKV_WASM_RELAXED_SIMD)
  using Codes = Nibbles;
  static Codes q4_codes(const uint8_t* p) {
    // The high nibbles by a 16-bit shift and the mask: V8 makes a byte shift a word shift and a mask built anew.
    const v128_t v = wasm_v128_load(p), mask = wasm_i8x16_splat(0x0f);
    return {wasm_v128_and(v, mask), wasm_v128_and(wasm_u16x8_shr(v, 4), mask)};
  }
  using Act = int8_t;
  static const Act* q4_act(const Int8Rows& a) { return a.q8; }
  static I q4_sum(const Codes& w, const int8_t* a8) {
    return (I)wasm_i32x4_extadd_pairwise_i16x8(
        wasm_i16x8_add(dot(wasm_v128_load(a8), w.lo), dot(wasm_v128_load(a8 + 16), w.hi)));
  }
#else
  struct Codes {
    I w[4];  // int16 lane j of w[i]: element 4j + i of the block, times 1, 16, 256, 1 (q4_prepare_sse41)
  };
  // Lane j of the 16 bytes as int16 holds the block's bytes 2j and 2j + 1, i.e. its elements 4j .. 4j + 3 a nibble
  // each, at bits 0, 4, 8 and 12. Masked in place, the middle two come out times 16 and 256, and the top one by a
  // shift: four operations a block, the factors made up in the activations (q4_prepare_sse41). Widening the bytes
  // (the low and the high nibbles, each extended from its low and high half) took 12 under V8: a byte shift is a
  // word shift and a mask made anew each time, and extending a high half needs a zeroed register.
  static Codes q4_codes(const uint8_t* p) {
    const I v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {{_mm_and_si128(v, _mm_set1_epi16(0x000f)), _mm_and_si128(v, _mm_set1_epi16(0x00f0)),
             _mm_and_si128(v, _mm_set1_epi16(0x0f00)), _mm_srli_epi16(v, 12)}};
  }
  using Act = int16_t;
  static const Act* q4_act(const Int8Rows& a) { return a.q; }
  static I q4_sum(const Codes& w, const int16_t* x) {
    return _mm_add_epi32(_mm_add_epi32(_mm_madd_epi16(w.w[0], load16(x)), _mm_madd_epi16(w.w[1], load16(x + 8))),
                         _mm_add_epi32(_mm_madd_epi16(w.w[2], load16(x + 16)), _mm_madd_epi16(w.w[3], load16(x + 24))));
  }
#endif
  // [v0 v1 v2 v3] -> [sum v0, sum v1, sum v2, sum v3]: two rounds of interleave-and-add, the first a pair at a time.
  static I reduce2(I x, I y) { return _mm_add_epi32(_mm_unpacklo_epi32(x, y), _mm_unpackhi_epi32(x, y)); }  // x y x y
  static I combine2(I p, I q) { return _mm_add_epi32(_mm_unpacklo_epi64(p, q), _mm_unpackhi_epi64(p, q)); }
  static F scales4(const uint16_t* s16, const float* d) {
    const I bits = _mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s16))), 16);
    return _mm_mul_ps(_mm_castsi128_ps(bits), _mm_loadu_ps(d));
  }
  static I sub(I x, I y) { return _mm_sub_epi32(x, y); }
  static I load4(const int32_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static I lane0(int32_t x) { return _mm_cvtsi32_si128(x); }
  static F scale4(I x, F s, F acc) { return _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(x), s)); }
};
}  // namespace
void quant_dot_rows_sse41(const QuantDotRows& q, int n0, int n1) { dot_detail::rows_fn<Sse41Dot>(q, n0, n1); }

#if !(defined(__EMSCRIPTEN__) && defined(QKV_WASM_RELAXED_SIMD))
namespace {
// A block in the nibbles' order is [E | O] (the 16 even elements, the 16 odd ones: element 2i at i, 2i + 1 at
// 16 + i). The codes' vectors take elements 4j, 4j + 1, 4j + 2, 4j + 3 (j = 0..7): E's even places, O's, E's odd
// places, O's, which come as c, 16 c, 256 c and c (q4_codes): times 256, 16, 1 and 256 here, every product is
// 256 c q. |256 q| <= 32512 fits int16; a block's sum, |256 sum c q| <= 256 * 32 * 15 * 127 < 2^24, is exact in
// int32 and in its float; zsum x 256 and d / 256 (a power of two: exact for a normal d) give back the same C.
//
// One block as quantize_activations makes it (q in the nibbles' order), then put in this kernel's order: the blocks
// the vector pass leaves (a partial last one, one with a NaN or an infinity, one whose 127 / max |a| overflows).
void q4_block_scalar(const float* x, int len, int16_t* q, float* d, int32_t* zsum) {
  int16_t t[kDotBlock];
  quantize_activations(x, len, 1, len, WeightFormat::Q4, t, d, nullptr, zsum);
  for (int j = 0; j < 8; ++j) {
    q[j] = static_cast<int16_t>(256 * t[2 * j]);
    q[8 + j] = static_cast<int16_t>(16 * t[16 + 2 * j]);
    q[16 + j] = t[2 * j + 1];
    q[24 + j] = static_cast<int16_t>(256 * t[17 + 2 * j]);
  }
  *zsum *= 256;
  *d *= 1.f / 256;
}
}  // namespace
#endif

void q4_quantize_sse41(const float* A, int lda, int M, int K, int16_t* q, float* d, int8_t* q8, int32_t* zsum) {
#if defined(__EMSCRIPTEN__) && defined(QKV_WASM_RELAXED_SIMD)
  quantize_activations(A, lda, M, K, WeightFormat::Q4, q, d, q8, zsum);  // the bytes, in quantize_activations' order
#else
  (void)q8;
  const int nb = (K + kDotBlock - 1) / kDotBlock;
  const __m128i magnitude = _mm_set1_epi32(0x7fffffff), lo = _mm_set1_epi32(-127), hi = _mm_set1_epi32(127);
  for (int m = 0; m < M; ++m) {
    const float* a = A + static_cast<size_t>(m) * lda;
    for (int b = 0; b < nb; ++b) {
      const size_t at = static_cast<size_t>(m) * nb + b;
      const float* x = a + b * kDotBlock;
      int16_t* qb = q + at * kDotBlock;
      const int len = std::min(kDotBlock, K - b * kDotBlock);
      if (len < kDotBlock) {
        q4_block_scalar(x, len, qb, d + at, zsum + at);
        continue;
      }
      // Row j of the block: elements 4j .. 4j + 3. max |a| as the largest of the magnitudes' bit patterns, as
      // quantize_activations takes it.
      __m128 v[8];
      __m128i top = _mm_setzero_si128();
      for (int j = 0; j < 8; ++j) {
        v[j] = _mm_loadu_ps(x + 4 * j);
        top = _mm_max_epu32(top, _mm_and_si128(_mm_castps_si128(v[j]), magnitude));
      }
      top = _mm_max_epu32(top, _mm_shuffle_epi32(top, _MM_SHUFFLE(1, 0, 3, 2)));
      top = _mm_max_epu32(top, _mm_shuffle_epi32(top, _MM_SHUFFLE(2, 3, 0, 1)));
      const uint32_t bits = static_cast<uint32_t>(_mm_cvtsi128_si32(top));
      const float amax = ops::bits_float(bits), inv = amax > 0.f ? 127.f / amax : 0.f;
      if (bits >= 0x7f800000u || std::isinf(inv)) {
        q4_block_scalar(x, len, qb, d + at, zsum + at);
        continue;
      }
      d[at] = amax / 127.f * (1.f / 256);
      // Two 4 x 4 transposes make column r of rows 4g .. 4g + 3 (elements 4j + r), whose codes (to nearest even, as
      // quantize_activations rounds) times 256, 16, 1 and 256 are lanes 4g .. 4g + 3 of the output's vector r.
      const __m128 scale = _mm_set1_ps(inv);
      __m128i c[2][4], sum = _mm_setzero_si128();
      for (int g = 0; g < 2; ++g) {
        const __m128* r = v + 4 * g;
        const __m128 t0 = _mm_unpacklo_ps(r[0], r[1]), t1 = _mm_unpacklo_ps(r[2], r[3]),
                     t2 = _mm_unpackhi_ps(r[0], r[1]), t3 = _mm_unpackhi_ps(r[2], r[3]);
        const __m128 col[4] = {_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3),
                               _mm_movehl_ps(t3, t2)};
        for (int k = 0; k < 4; ++k) {
          c[g][k] = _mm_min_epi32(_mm_max_epi32(_mm_cvtps_epi32(_mm_mul_ps(col[k], scale)), lo), hi);
          sum = _mm_add_epi32(sum, c[g][k]);
        }
      }
      const auto store = [&](int k, __m128i lo4, __m128i hi4) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 8 * k), _mm_packs_epi32(lo4, hi4));
      };
      store(0, _mm_slli_epi32(c[0][0], 8), _mm_slli_epi32(c[1][0], 8));
      store(1, _mm_slli_epi32(c[0][1], 4), _mm_slli_epi32(c[1][1], 4));
      store(2, c[0][2], c[1][2]);
      store(3, _mm_slli_epi32(c[0][3], 8), _mm_slli_epi32(c[1][3], 8));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, _MM_SHUFFLE(1, 0, 3, 2)));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, _MM_SHUFFLE(2, 3, 0, 1)));
      zsum[at] = 8 * 256 * _mm_cvtsi128_si32(sum);
    }
  }
#endif
}
}  // namespace qkv::kernels
