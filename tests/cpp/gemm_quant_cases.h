#pragma once
// The quantized-weight cases as the CUDA kernels (kernels/cuda/gemm_quant.cuh) are tested on them, on the GPU
// (cuda/gemm_quant_test.cpp) and on the warp emulator (emulation/gemm_quant_emulation_test.cpp): a packed matrix
// whose padding is garbage, and the checks of a product and of dequantized rows against its dequantized floats.
//   gemm_quant: |got - want| <= 1e-5 * sum_k |a w| (gemm's check: the same products of the same dequantized
//     floats, summed in another order), want in double; C past N must keep its NaN.
//   dequantize_rows: each element's float exactly; the column past K must keep its NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/weight_format.h"
#include "ops/weight_quantize.h"
#include "test_util.h"

namespace qkv::test {

constexpr ops::WeightFormat kPackedFormats[] = {ops::WeightFormat::F16, ops::WeightFormat::BF16,
                                                ops::WeightFormat::Int8, ops::WeightFormat::Q4};

// A packed (N, K) matrix of N(0, 1) weights (every fifth row 2^-16 of that) at `offset` bytes past a 16-byte
// boundary (`data`, `bytes` long), its
// scales (one more, NaN: a read past them shows) and its dequantized floats. Every padding byte is garbage (0xff:
// a NaN as a half and as a bf16, 0xff as int8; code 10 as Q4), so that a kernel using an element past K fails.
struct PackedMatrix {
  std::vector<uint8_t> storage;
  std::vector<float> scales, dequantized;
  const uint8_t* data = nullptr;
  size_t bytes = 0;

  PackedMatrix(ops::WeightFormat f, int N, int K, uint64_t seed, size_t offset = 0) {
    const size_t stride = ops::row_stride(f, K);
    bytes = ops::packed_bytes(f, N, K);
    storage.assign(bytes + 32, 0);
    const uintptr_t at = reinterpret_cast<uintptr_t>(storage.data());
    uint8_t* p = storage.data() + ((16 - at % 16) % 16) + offset;
    scales.assign(static_cast<size_t>(N) * ops::scales_per_row(f, K) + 1, std::nanf(""));
    auto w = randn(static_cast<size_t>(N) * K, seed);
    // Every fifth row 2^-16 smaller: its f16 elements mostly subnormal halves, its Q4 scales far from 1.
    for (int n = 0; n < N; n += 5)
      for (int k = 0; k < K; ++k) w[static_cast<size_t>(n) * K + k] *= 0x1p-16f;
    ops::quantize_rows(f, w.data(), N, K, p, scales.data());
    dequantized.resize(w.size());
    ops::dequantize_rows_host(f, p, scales.data(), N, K, dequantized.data());
    // Q4 with an odd number of groups: the padding half of each row's last scale word made a large bfloat16
    // (0x7bff: 6.6e35), so that a kernel reading a scale past its row's groups shows it.
    if (const int G = ops::q4_groups(K); f == ops::WeightFormat::Q4 && G % 2 == 1)
      for (int n = 0; n < N; ++n) {
        const uint16_t big = 0x7bff;
        std::memcpy(
            reinterpret_cast<unsigned char*>(scales.data() + static_cast<size_t>(n) * ops::scales_per_row(f, K)) +
                2 * static_cast<size_t>(G),
            &big, sizeof big);
      }
    for (int n = 0; n < N; ++n) {
      uint8_t* row = p + static_cast<size_t>(n) * stride;
      if (f == ops::WeightFormat::Q4) {
        for (size_t k = static_cast<size_t>(K); k < 2 * stride; ++k)
          row[k / 2] = static_cast<uint8_t>(k % 2 ? (row[k / 2] & 0x0f) | 0xa0 : (row[k / 2] & 0xf0) | 0x0a);
      } else {
        const size_t used = f == ops::WeightFormat::Int8 ? static_cast<size_t>(K) : 2 * static_cast<size_t>(K);
        for (size_t b = used; b < stride; ++b) row[b] = 0xff;
      }
    }
    data = p;
  }
};

// C (M, ldc) = A (M, lda; K used) times w's transpose, as gemm_quant computes it: the check above.
inline ::testing::AssertionResult gemm_quant_matches(const std::vector<float>& C, int M, int N, int K,
                                                     const std::vector<float>& A, int lda, int ldc,
                                                     const PackedMatrix& w) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < ldc; ++n) {
      const float got = C[static_cast<size_t>(m) * ldc + n];
      if (n >= N) {
        if (!std::isnan(got)) return ::testing::AssertionFailure() << "C[" << m << ", " << n << "] past N was written";
        continue;
      }
      double want = 0, scale = 0;
      for (int k = 0; k < K; ++k) {
        const double t =
            static_cast<double>(A[static_cast<size_t>(m) * lda + k]) * w.dequantized[static_cast<size_t>(n) * K + k];
        want += t;
        scale += std::abs(t);
      }
      const double tol = 1e-5 * std::max(scale, 1e-30);
      if (!(std::abs(got - want) <= tol))
        return ::testing::AssertionFailure()
               << "C[" << m << ", " << n << "] = " << got << ", want " << want << " (tolerance " << tol << ")";
    }
  return ::testing::AssertionSuccess();
}

// out (rows, ld = K + 1) holds w's rows exactly, and column K its NaN.
inline ::testing::AssertionResult dequantized_rows_match(const std::vector<float>& out, int rows, int K,
                                                         const PackedMatrix& w) {
  const int ld = K + 1;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < ld; ++k) {
      const float got = out[static_cast<size_t>(r) * ld + k];
      if (k == K) {
        if (!std::isnan(got))
          return ::testing::AssertionFailure() << "out[" << r << ", " << k << "] past K was written";
      } else if (got != w.dequantized[static_cast<size_t>(r) * K + k]) {
        return ::testing::AssertionFailure() << "out[" << r << ", " << k << "] = " << got << ", want "
                                             << w.dequantized[static_cast<size_t>(r) * K + k];
      }
    }
  return ::testing::AssertionSuccess();
}

}  // namespace qkv::test
