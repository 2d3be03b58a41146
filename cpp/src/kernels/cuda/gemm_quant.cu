// The host side of the quantized-weight ops (gemm_quant.cuh has the kernels): the launches. The executor checks
// the arguments first (ops/weight_quantize.h), so a launch here has valid sizes.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_quant.cuh"

namespace qkv::kernels::cuda {

void gemm_quant(int M, int N, int K, const float* A, int lda, ops::WeightFormat f, const uint8_t* W,
                const float* scales, float* C, int ldc) {
  const size_t n = static_cast<size_t>(M) * N;
  if (n == 0) return;
  gemm_quant_kernel<<<grid_for(n, kQuantThreads), kQuantThreads, 0, stream()>>>(M, N, K, A, lda, f, W, scales, C, ldc);
  check_launch("gemm_quant");
}

void dequantize_rows(float* out, int ld_out, ops::WeightFormat f, const uint8_t* W, const float* scales, int rows,
                     int K) {
  const size_t n = static_cast<size_t>(rows) * K;
  if (n == 0) return;
  dequantize_rows_kernel<<<grid_for(n, kQuantThreads), kQuantThreads, 0, stream()>>>(out, ld_out, f, W, scales, rows,
                                                                                     K);
  check_launch("dequantize_rows");
}

void embedding_forward_quant(float* x, const int32_t* tokens, ops::WeightFormat f, const uint8_t* wte,
                             const float* wte_scales, const float* pos, float scale, int B, int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  embedding_forward_quant_kernel<<<grid_for(n, kQuantThreads), kQuantThreads, 0, stream()>>>(
      x, tokens, f, wte, wte_scales, pos, scale, T, C, n);
  check_launch("embedding_forward_quant");
}

}  // namespace qkv::kernels::cuda
