#pragma once
// The product of activations with a weight matrix in whatever format it is stored: what every layer that
// multiplies by a weight (Linear, attention's projections, a language model's head) calls, so that a quantized
// model (nn::Parameters::quantize) runs the same layers.
#include <algorithm>

#include "nn/parameters.h"

namespace qkv::nn {

// y (rows, n) = x (rows, K) W[n0 : n0 + n]^T, W = w (N, K) as torch.nn.Linear stores it; x's rows ldx floats
// apart, y's ldy; y is overwritten. float32: gemm; packed: gemm_quant on rows n0 .. n0 + n - 1 of the packed
// rows (each row u32-aligned, so any row offset is valid on every device: ops/weight_format.h).
void weight_product(ops::Backend& ops, const Param& w, int n0, int n, const float* x, int ldx, int rows, float* y,
                    int ldy);

// A whole weight's product with its bias and activation: a (rows, N) = act(x (rows, K) w^T + b), h the
// pre-activation (a Linear layer's forward: ops.h's linear_forward for float32, linear_quant_forward packed; each
// executor may fuse the bias and activation into the product). x's rows K floats apart; b may be empty.
void weight_linear_forward(ops::Backend& ops, const Param& w, Span a, Span h, CSpan x, CSpan b, ops::Act act, int rows);

// The backward's product through the same rows: dx (rows, K) = dy (rows, n) W[n0 : n0 + n] + beta * dx, dy's rows
// lddy apart, dx's lddx. float32: gemm; packed (a frozen quantized base under LoRA adapters): the rows dequantized
// (dequantize_rows) kWeightChunk at a time into `scratch`, each chunk's product added, so the scratch stays small
// (weight_dx_scratch_size) whatever the matrix (a tied GPT-2 head is 50257 rows).
void weight_product_dx(ops::Backend& ops, const Param& w, int n0, int n, const float* dy, int lddy, int rows, float* dx,
                       int lddx, float beta, Span scratch);
inline constexpr int kWeightChunk = 256;
// Floats of the scratch weight_product_dx needs for w (0 for a float32 weight).
inline size_t weight_dx_scratch_size(const Param& w) {
  return w.is_packed() ? static_cast<size_t>(std::min(kWeightChunk, w.rows())) * static_cast<size_t>(w.cols()) : 0;
}

}  // namespace qkv::nn
