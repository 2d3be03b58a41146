#pragma once
// WebAssembly only: faster float -> int32 conversions under xsimd's SSE code. Include before any xsimd header.
//
// The wasm build runs xsimd's sse4_1 kernels through Emscripten's SSE emulation (TOOLCHAIN.md). Emscripten
// 3.1.6 emulates _mm_cvttps_epi32 and _mm_cvtps_epi32 with a scalar lrint loop per lane (its emmintrin.h:
// "TODO: optimize"), and xsimd's float exp converts its reduced exponent with one (exp -> ldexp(x, to_int(k))),
// so every exp, and every erf that calls it, paid four scalar conversions: GELU's backward was 7.3% of the
// char GPT training step in Node against 2.6% natively. SIMD128 has the conversion as one instruction,
// i32x4.trunc_sat_f32x4. The results are the same for every value that fits an int32 (exp's k always does);
// out of range, SSE gives 0x80000000 where trunc_sat saturates (and gives 0 for NaN), which no kernel relies on.
#ifdef __EMSCRIPTEN__
#include <emmintrin.h>
#include <wasm_simd128.h>

static inline __m128i qkv_wasm_cvttps_epi32(__m128 a) { return (__m128i)wasm_i32x4_trunc_sat_f32x4((v128_t)a); }
// SSE rounds to nearest even in the default mode, as f32x4.nearest does.
static inline __m128i qkv_wasm_cvtps_epi32(__m128 a) {
  return (__m128i)wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest((v128_t)a));
}
#define _mm_cvttps_epi32 qkv_wasm_cvttps_epi32
#define _mm_cvtps_epi32 qkv_wasm_cvtps_epi32
#endif
