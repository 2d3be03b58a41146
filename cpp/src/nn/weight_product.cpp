#include "nn/weight_product.h"

namespace qkv::nn {

void weight_product(ops::Backend& ops, const Param& w, int n0, int n, const float* x, int ldx, int rows, float* y,
                    int ldy) {
  const int K = w.cols();
  if (!w.is_packed()) {
    ops.gemm(false, true, rows, n, K, 1.f, x, ldx, w.value.data() + static_cast<size_t>(n0) * K, K, 0.f, y, ldy);
    return;
  }
  const size_t stride = ops::row_stride(w.format, K), per_row = static_cast<size_t>(ops::scales_per_row(w.format, K));
  const float* scales = w.scales.empty() ? nullptr : w.scales.data() + static_cast<size_t>(n0) * per_row;
  ops.gemm_quant(rows, n, K, x, ldx, static_cast<int>(w.format), w.packed.data() + static_cast<size_t>(n0) * stride,
                 scales, y, ldy, w.int8_act);
}

void weight_linear_forward(ops::Backend& ops, const Param& w, Span a, Span h, CSpan x, CSpan b, ops::Act act,
                           int rows) {
  const int N = w.rows(), K = w.cols();
  if (!w.is_packed()) return ops.linear_forward(a, h, x, w.value, b, act, rows, K, N);
  ops.linear_quant_forward(a, h, x.data(), static_cast<int>(w.format), w.packed.data(),
                           w.scales.empty() ? nullptr : w.scales.data(), b, act, rows, K, N, w.int8_act);
}

void weight_product_dx(ops::Backend& ops, const Param& w, int n0, int n, const float* dy, int lddy, int rows, float* dx,
                       int lddx, float beta, Span scratch) {
  const int K = w.cols();
  if (!w.is_packed()) {
    ops.gemm(false, false, rows, K, n, 1.f, dy, lddy, w.value.data() + static_cast<size_t>(n0) * K, K, beta, dx, lddx);
    return;
  }
  const size_t stride = ops::row_stride(w.format, K), per_row = static_cast<size_t>(ops::scales_per_row(w.format, K));
  for (int c0 = 0; c0 < n; c0 += kWeightChunk) {
    const int c = std::min(kWeightChunk, n - c0), row = n0 + c0;
    const float* scales = w.scales.empty() ? nullptr : w.scales.data() + static_cast<size_t>(row) * per_row;
    ops.dequantize_rows(scratch.data(), K, static_cast<int>(w.format),
                        w.packed.data() + static_cast<size_t>(row) * stride, scales, c, K);
    // dx += dy[:, c0 : c0 + c] W[row : row + c]  (the first chunk with the caller's beta)
    ops.gemm(false, false, rows, K, c, 1.f, dy + c0, lddy, scratch.data(), K, c0 == 0 ? beta : 1.f, dx, lddx);
  }
}

}  // namespace qkv::nn
