#pragma once
// The host side of quantized weights (ops/weight_format.h has the formats): the quantizer the model and the
// tests use, its inverse, and the argument checks every executor runs before a quantized op (one wording of
// each error, whatever the device).
//
// Quantizer rules (per row n of W (N, K), fp32 in):
//   F16, BF16: each element rounded to nearest even (ops/weight_format.h: f32_to_f16, f32_to_bf16).
//   Int8: scale[n] = max_k |w| / 127; q = round_to_nearest_even(w / scale) clamped to [-127, 127]; an all-zero row
//         has scale 0 and q 0. (Symmetric: -128 is never used, so q and -q dequantize to opposite values.)
//   Q4:   per group of 32 along K, m = the element of the group with the largest |w| (the first one on ties),
//         d = bf16(m / -8) (rounded to the nearest bfloat16, ties to even: the scale stored),
//         q = clamp(round_to_nearest_even(w / d) + 8, 0, 15), d == 0 gives q = 8; the padding past K is q = 8 (0).
//         llama.cpp's Q4_0 rule: the largest magnitude lands on code 0 (-8 d), exactly where d is exact.
// Weights must be finite (a NaN or inf would poison a whole row's scale): quantize_rows refuses them.
#include <cstddef>
#include <cstdint>

#include "ops/weight_format.h"

namespace qkv::ops {

// Bytes of a packed (N, K) matrix.
inline size_t packed_bytes(WeightFormat f, int N, int K) {
  return static_cast<size_t>(N > 0 ? N : 0) * row_stride(f, K);
}

// "f32", "f16", "bf16", "int8", "q4" (the names of the CLI and the JS API).
const char* format_name(WeightFormat f);

// w (N, K) fp32 row-major -> packed (packed_bytes(f, N, K) bytes, padding written) and scales (N *
// scales_per_row(f, K) 32-bit words; may be null when that is 0). Throws qkv::Error for F32, N or K < 0, a weight
// that is not finite (naming its row and column).
void quantize_rows(WeightFormat f, const float* w, int N, int K, uint8_t* packed, float* scales);
// The inverse: out (N, K) fp32 = every element of packed (ops/weight_format.h: dequantize_element).
void dequantize_rows_host(WeightFormat f, const uint8_t* packed, const float* scales, int N, int K, float* out);

// The checks of the quantized ops (ops/op_list.def), `who` naming the op and executor ("gemm_quant (cpu)"):
// a format that is not F16..Q4, negative sizes, leading dimensions below the row width, a null pointer where
// there is data, or (embedding) spans too small. Each throws qkv::Error naming the argument.
WeightFormat check_quant_format(const char* who, int format);
void check_gemm_quant(const char* who, int M, int N, int K, const float* A, int lda, int format, const uint8_t* W,
                      const float* scales, const float* C, int ldc);
void check_dequantize_rows(const char* who, const float* out, int ld_out, int format, const uint8_t* W,
                           const float* scales, int rows, int K);
void check_embedding_forward_quant(const char* who, size_t x_size, const int32_t* tokens, int format,
                                   const uint8_t* wte, const float* wte_scales, size_t pos_size, int B, int T, int C);

}  // namespace qkv::ops
