// The quantized-weight ops on the GPU (cuda_kernels.h: gemm_quant, dequantize_rows, embedding_forward_quant):
// straightforward kernels, one thread per output element, each weight dequantized by ops/weight_format.h's
// dequantize_element (the same float as on every executor). gemm_quant sums in fp32 over k in order.
// This header holds the kernels (device code only) so that tests/cpp/emulation can run them on the CPU as well;
// gemm_quant.cu launches them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "ops/weight_format.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kQuantThreads = 256;

// C (M,N) = A (M,K) deq(W)^T: thread i computes C[i / N, i % N].
__global__ void gemm_quant_kernel(int M, int N, int K, const float* A, int lda, ops::WeightFormat f, const uint8_t* W,
                                  const float* scales, float* C, int ldc) {
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  const size_t total = static_cast<size_t>(M) * N;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / N), n = static_cast<int>(i % N);
    const uint8_t* row = W + n * stride;
    const float* s = spr ? scales + static_cast<size_t>(n) * spr : nullptr;
    const float* a = A + static_cast<size_t>(m) * lda;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += a[k] * ops::dequantize_element(f, row, s, k);
    C[static_cast<size_t>(m) * ldc + n] = acc;
  }
}

// out[r, k] (stride ld_out) = deq(W[r, k]).
__global__ void dequantize_rows_kernel(float* out, int ld_out, ops::WeightFormat f, const uint8_t* W,
                                       const float* scales, int rows, int K) {
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  const size_t total = static_cast<size_t>(rows) * K;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / K;
    const int k = static_cast<int>(i % K);
    out[r * ld_out + k] = ops::dequantize_element(f, W + r * stride, spr ? scales + r * spr : nullptr, k);
  }
}

// x[r, c] = scale * deq(wte[tokens[r], c]) + pos[r % T, c] (pos null: + 0), unfused as the CPU computes it.
__global__ void embedding_forward_quant_kernel(float* x, const int32_t* tokens, ops::WeightFormat f, const uint8_t* wte,
                                               const float* wte_scales, const float* pos, float scale, int T, int C,
                                               size_t n) {
  const size_t stride = ops::row_stride(f, C);
  const int spr = ops::scales_per_row(f, C);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / C;
    const int c = static_cast<int>(i % C), t = static_cast<int>(r % T);
    const size_t e = static_cast<size_t>(tokens[r]);
    const float w = ops::dequantize_element(f, wte + e * stride, spr ? wte_scales + e * spr : nullptr, c);
    x[i] = __fadd_rn(__fmul_rn(scale, w), pos ? pos[static_cast<size_t>(t) * C + c] : 0.f);
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
