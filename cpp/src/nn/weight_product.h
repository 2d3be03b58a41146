#pragma once
// The product of activations with a weight matrix in whatever format it is stored: what every layer that
// multiplies by a weight (Linear, attention's projections, a language model's head) calls, so that a quantized
// model (nn::Parameters::quantize) runs the same layers.
#include "nn/parameters.h"

namespace qkv::nn {

// y (rows, n) = x (rows, K) W[n0 : n0 + n]^T, W = w (N, K) as torch.nn.Linear stores it; x's rows ldx floats
// apart, y's ldy; y is overwritten. float32: gemm; packed: gemm_quant on rows n0 .. n0 + n - 1 of the packed
// rows (each row u32-aligned, so any row offset is valid on every device: ops/weight_format.h).
void weight_product(ops::Backend& ops, const Param& w, int n0, int n, const float* x, int ldx, int rows, float* y,
                    int ldy);

}  // namespace qkv::nn
