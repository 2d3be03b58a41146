#pragma once
// The product with quantized weights and int8 activations (gemm_quant's int8_act, ops/op_list.def): what
// gemm_quant.cpp and the per-instruction-set files share.
//
// The numbers. Each row of A is cut into blocks of 32 along K (the Q4 group) and quantized as llama.cpp's Q8_0
// quantizes activations: d = max |a| / 127 over the block, q = round(a / d) (nearest even) in [-127, 127], so
// a ~= q d. Then, with W's codes c and scales s (ops/weight_format.h),
//   int8:  C[m, n] = s[n] * sum_b d[m, b] * sum_{k in b} c[n, k] q[m, k]
//   q4:    C[m, n] =        sum_b s[n, b] d[m, b] * sum_{k in b} (c[n, k] - 8) q[m, k]
// The inner sums are integers, exact in int32 (|sum| <= 32 * 127 * 127); only their scaling is float. So the
// result differs from the fp32 product by A's rounding to 8 bits (about 0.4% of a product's size for Gaussian
// activations), and a kernel from the reference (gemm_quant_int8_act_reference) by the float order only.
//
// Why: the fp32 row kernels turn every code into a float and multiply it by a float activation, about three
// operations per weight, which bounds them by instructions, not by the bytes read; integer multiply-adds of
// 16-bit pairs (pmaddwd, wasm's i32x4.dot_i16x8_s) take eight weights an operation. The activations are
// quantized once per call and widened to int16 (they are read once per row of W: N times).
#include <cstddef>
#include <cstdint>

#include "ops/weight_format.h"

namespace qkv::kernels {

using ops::WeightFormat;

constexpr int kDotBlock = 32;

// A quantized: M rows of nb blocks, widened to int16, row m's block b at q + (m * nb + b) * 32 with its scale at
// d[m * nb + b]. Within a Q4 block the codes are in the nibbles' order (the 16 even elements, then the 16 odd ones:
// byte i of a group holds elements 2i and 2i + 1), within an int8 block in natural order; 0 past K. q8: the same
// codes as int8 (a kernel that multiplies bytes reads these), zsum: z x each block's sum of codes, z the offset that
// makes f's weight codes c unsigned bytes for such a kernel (sum (c - z) q = sum c q - z sum q): Q4's implicit zero
// point 8 (its codes are 0..15, standing for c - 8), int8's 128 (c + 128 = c ^ 0x80, so sum c q = sum (c ^ 0x80) q -
// 128 sum q). Both may be null for kernels that do not read them.
struct Int8Rows {
  int M = 0, K = 0, nb = 0;
  const int16_t* q = nullptr;
  const float* d = nullptr;
  const int8_t* q8 = nullptr;
  const int32_t* zsum = nullptr;
};

// Quantizes A (M rows of K, lda apart) into q (M * nb * 32) and d (M * nb), nb = ceil(K / 32), in f's order, and,
// where not null, q8 (M * nb * 32) and zsum (M * nb). A block with a NaN or infinity gets d = NaN (its products are
// NaN, as the fp32 product's would be), codes 0.
void quantize_activations(const float* A, int lda, int M, int K, WeightFormat f, int16_t* q, float* d,
                          int8_t* q8 = nullptr, int32_t* zsum = nullptr);

// C[m, n] for the M <= kQuantRowsMax rows of a and n in [n0, n1); W's row n at W + n * stride, its scales at
// scales + n * spr.
struct QuantDotRows {
  WeightFormat f;
  Int8Rows a;
  const uint8_t* W;
  size_t stride;
  const float* scales;
  int spr;
  float* C;
  int ldc;
};
using QuantDotFn = void (*)(const QuantDotRows& q, int n0, int n1);

// The scalar kernel (every instruction set without its own: NEON, scalar).
void quant_dot_rows_scalar(const QuantDotRows& q, int n0, int n1);
// The SSE4.1 kernel, which the WebAssembly build compiles to SIMD128 (kernels/cpu/arch/sse41.cpp), and the AVX2 one
// (arch/avx2.cpp; AVX-512 machines run it too). For Q4 both read zsum, and the AVX2 one and the relaxed-SIMD
// WebAssembly build's q8.
void quant_dot_rows_sse41(const QuantDotRows& q, int n0, int n1);
// The SSE4.1 kernel's Q4 reads q in its own order and scale: within each block, elements 4j, then 4j + 1, 4j + 2 and
// 4j + 3 (j = 0..7), as its codes come out of 16-bit lanes, times 256, 16, 1 and 256 so that each product is 256 c q;
// zsum x 256 and d / 256 to match. q4_quantize_sse41 is quantize_activations for it (the same codes, put in that
// order as they are made); in the relaxed-SIMD WebAssembly build, whose Q4 reads q8, it is quantize_activations.
void q4_quantize_sse41(const float* A, int lda, int M, int K, int16_t* q, float* d, int8_t* q8, int32_t* zsum);
void quant_dot_rows_avx2(const QuantDotRows& q, int n0, int n1);
// AVX-512 VNNI (arch/avx512vnni.cpp): int8 two blocks at a time with vpdpbusd, Q4 four, reading q8 and zsum; for Q4,
// q8 in its own order, which q4_group_order_avx512vnni makes (in place, from Int8Rows' order): within each whole
// group of four blocks of a row, the four blocks' 16 even elements, then their 16 odd ones (what the low and the high
// nibbles of the group's 64 bytes of codes hold); blocks past a row's last whole group as they were.
void quant_dot_rows_avx512vnni(const QuantDotRows& q, int n0, int n1);
void q4_group_order_avx512vnni(int8_t* q8, int M, int nb);

}  // namespace qkv::kernels
