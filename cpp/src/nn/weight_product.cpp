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
                 scales, y, ldy);
}

}  // namespace qkv::nn
