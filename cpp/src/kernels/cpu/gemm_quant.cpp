// The product with quantized weights, C (M,N) = A (M,K) W^T (kernels.h: gemm_quant), and its naive oracle.
// Rows of W are split over the thread pool; each thread dequantizes one row of W at a time into a buffer of K
// floats (exactly dequantize_element's values) and takes its dot product with every row of A, so each byte of W
// is read once per call whatever M is.
#include <algorithm>
#include <vector>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void dequantize_rows(float* out, int ld_out, WeightFormat f, const uint8_t* W, const float* scales, int rows, int K) {
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = W + static_cast<size_t>(r) * stride;
      const float* s = spr ? scales + static_cast<size_t>(r) * spr : nullptr;
      float* o = out + static_cast<size_t>(r) * ld_out;
      for (int k = 0; k < K; ++k) o[k] = ops::dequantize_element(f, row, s, k);
    }
  });
}

void gemm_quant(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W, const float* scales,
                float* C, int ldc) {
  if (M == 0 || N == 0) return;
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  parallel_for(N, [&](int64_t n0, int64_t n1) {
    thread_local std::vector<float> w;
    w.resize(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* row = W + static_cast<size_t>(n) * stride;
      const float* s = spr ? scales + static_cast<size_t>(n) * spr : nullptr;
      for (int k = 0; k < K; ++k) w[static_cast<size_t>(k)] = ops::dequantize_element(f, row, s, k);
      for (int m = 0; m < M; ++m) {
        const float* a = A + static_cast<size_t>(m) * lda;
        float acc = 0.f;
        for (int k = 0; k < K; ++k) acc += a[k] * w[static_cast<size_t>(k)];
        C[static_cast<size_t>(m) * ldc + n] = acc;
      }
    }
  });
}

void gemm_quant_reference(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W,
                          const float* scales, float* C, int ldc) {
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const uint8_t* row = W + static_cast<size_t>(j) * stride;
      const float* s = spr ? scales + static_cast<size_t>(j) * spr : nullptr;
      float acc = 0.f;
      for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(i) * lda + k] * ops::dequantize_element(f, row, s, k);
      C[static_cast<size_t>(i) * ldc + j] = acc;
    }
}

}  // namespace qkv::kernels
