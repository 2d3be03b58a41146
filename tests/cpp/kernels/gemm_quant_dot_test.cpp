// gemm_quant with int8 activations (kernels/cpu/gemm_quant_dot.h): the activation quantizer against Q8_0's rule,
// the naive oracle against the same formula in double, every instruction set's kernel against the oracle over
// ragged shapes (K around the blocks of 32, a partial last block, 1..8 rows of A, 1..2 threads), and the product
// against the fp32 product of the same weights within the bound A's rounding allows.
#include "kernels/cpu/gemm_quant_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "ops/weight_quantize.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::gemm_quant_dot_test {
namespace {

using kernels::kDotBlock;
using ops::WeightFormat;
constexpr WeightFormat kFormats[] = {WeightFormat::Int8, WeightFormat::Q4};

struct Packed {
  std::vector<uint8_t> bytes;
  std::vector<float> scales, values;  // values: the dequantized (rows, K)
};
Packed pack(WeightFormat f, int rows, int K, uint64_t seed) {
  const auto w = test::randn(static_cast<size_t>(rows) * K, seed);
  Packed p{std::vector<uint8_t>(ops::packed_bytes(f, rows, K)),
           std::vector<float>(static_cast<size_t>(rows) * ops::scales_per_row(f, K) + 1), std::vector<float>(w.size())};
  ops::quantize_rows(f, w.data(), rows, K, p.bytes.data(), p.scales.data());
  ops::dequantize_rows_host(f, p.bytes.data(), p.scales.data(), rows, K, p.values.data());
  return p;
}

// Where element i of a block sits in f's order.
int place(WeightFormat f, int i) { return f == WeightFormat::Q4 ? (i % 2) * (kDotBlock / 2) + i / 2 : i; }

TEST(GemmQuantDot, ActivationsAreQuantizedByQ8ZerosRule) {
  const int M = 3, K = 77, lda = 80, nb = 3;  // a partial last block of 13
  auto A = test::randn(static_cast<size_t>(M) * lda, 5);
  for (int k = 32; k < 64; ++k) A[static_cast<size_t>(lda) + k] = 0.f;             // row 1, block 1: all zero
  A[2 * static_cast<size_t>(lda) + 40] = std::numeric_limits<float>::quiet_NaN();  // row 2, block 1
  // Row 1, block 2: max |a| = 127, so a / d = a exactly, and halfway values, which round to even as nearbyint does
  const float ties[] = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -125.5f, 3.5f};
  for (int i = 0; i < 10; ++i) A[static_cast<size_t>(lda) + 64 + i] = ties[i];
  for (WeightFormat f : kFormats) {
    std::vector<int16_t> q(static_cast<size_t>(M) * nb * kDotBlock, 99);
    std::vector<float> d(static_cast<size_t>(M) * nb);
    std::vector<int8_t> q8(q.size(), 99);
    std::vector<int32_t> zsum(d.size(), 99);
    kernels::quantize_activations(A.data(), lda, M, K, f, q.data(), d.data(), q8.data(), zsum.data());
    // The byte copy and z x each block's sum, z = 8 (q4) or 128 (int8): the kernels that multiply bytes.
    for (size_t b = 0; b < d.size(); ++b) {
      int32_t sum = 0;
      for (int i = 0; i < kDotBlock; ++i) {
        EXPECT_EQ(q8[b * kDotBlock + i], q[b * kDotBlock + i]);
        sum += q[b * kDotBlock + i];
      }
      EXPECT_EQ(zsum[b], (f == WeightFormat::Q4 ? 8 : 128) * sum);
    }
    for (int m = 0; m < M; ++m)
      for (int b = 0; b < nb; ++b) {
        const float* a = A.data() + static_cast<size_t>(m) * lda + b * kDotBlock;
        const int16_t* qb = q.data() + (static_cast<size_t>(m) * nb + b) * kDotBlock;
        const float db = d[static_cast<size_t>(m) * nb + b];
        const int len = std::min(kDotBlock, K - b * kDotBlock);
        if (m == 2 && b == 1) {
          EXPECT_TRUE(std::isnan(db));
          for (int i = 0; i < kDotBlock; ++i) EXPECT_EQ(qb[i], 0);
          continue;
        }
        float amax = 0.f;
        for (int i = 0; i < len; ++i) amax = std::max(amax, std::abs(a[i]));
        EXPECT_EQ(db, amax / 127.f) << "row " << m << " block " << b;
        for (int i = 0; i < kDotBlock; ++i) {
          const int code = qb[place(f, i)];
          if (i >= len || amax == 0.f) {
            EXPECT_EQ(code, 0);
            continue;
          }
          EXPECT_LE(std::abs(code), 127);
          EXPECT_EQ(code, static_cast<int>(std::nearbyint(a[i] * (127.f / amax))));
          // The rounding error is at most half a step (and the largest element is exact).
          EXPECT_LE(std::abs(a[i] - code * db), 0.5f * db * (1 + 1e-5f)) << "row " << m << " block " << b << " " << i;
        }
      }
  }
}

// The SSE4.1 (and plain WebAssembly) kernel's Q4 quantizer makes quantize_activations' codes in that kernel's order and
// scale (gemm_quant_dot.h): element 4j + r of a block at 8r + j times 256, 16, 1, 256; zsum x 256, d / 256. Whole
// blocks go through vectors, the others (a partial last block, a NaN, an infinity, a largest magnitude so small that
// 127 over it overflows) element by element: every kind at K around the block, ties included.
TEST(GemmQuantDot, Sse41Q4QuantizerIsQuantizeActivationsInItsKernelsOrder) {
#if !(defined(__x86_64__) || defined(__i386__))
  GTEST_SKIP() << "the SSE4.1 unit is built on x86 only";
#else
  const int M = 3;
  for (int K : {1, 31, 32, 33, 64, 77, 100, 160, 768}) {
    const int lda = K + 5, nb = (K + kDotBlock - 1) / kDotBlock;
    auto A = test::randn(static_cast<size_t>(M) * lda, 90 + static_cast<uint64_t>(K), 3.f);
    const auto at = [&](int m, int k) -> float& { return A[static_cast<size_t>(m) * lda + k]; };
    if (K >= 64) {
      for (int k = 32; k < 64; ++k) at(1, k) = 0.f;               // all zero
      at(2, 40) = std::numeric_limits<float>::quiet_NaN();        // a NaN
      for (int k = 0; k < 32; ++k) at(2, k) = 1e-38f * (k - 16);  // max 1.6e-37: 127 / max overflows
    }
    if (K >= 32) {
      const float ties[] = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -125.5f, 3.5f, -127.f, 63.5f};
      for (int i = 0; i < 12; ++i) at(1, i * 2) = ties[i];  // max |a| = 127: a / d = a, halfway values to even
      at(0, K - 1) = -std::numeric_limits<float>::infinity();
    }
    std::vector<int16_t> want(static_cast<size_t>(M) * nb * kDotBlock), got(want.size(), 99);
    std::vector<float> d_want(static_cast<size_t>(M) * nb), d_got(d_want.size(), 99.f);
    std::vector<int32_t> z_want(d_want.size()), z_got(d_want.size(), 99);
    std::vector<int8_t> q8(want.size());
    kernels::quantize_activations(A.data(), lda, M, K, WeightFormat::Q4, want.data(), d_want.data(), nullptr,
                                  z_want.data());
    kernels::q4_quantize_sse41(A.data(), lda, M, K, got.data(), d_got.data(), q8.data(), z_got.data());
    const int factor[4] = {256, 16, 1, 256};
    for (size_t b = 0; b < d_want.size(); ++b) {
      const std::string where = "K=" + std::to_string(K) + " block " + std::to_string(b);
      if (std::isnan(d_want[b]))
        EXPECT_TRUE(std::isnan(d_got[b])) << where;
      else
        EXPECT_EQ(ops::float_bits(d_got[b]), ops::float_bits(d_want[b] * (1.f / 256))) << where;
      EXPECT_EQ(z_got[b], 256 * z_want[b]) << where;
      for (int j = 0; j < 8; ++j)
        for (int r = 0; r < 4; ++r)
          ASSERT_EQ(got[b * kDotBlock + 8 * r + j],
                    factor[r] * want[b * kDotBlock + place(WeightFormat::Q4, 4 * j + r)])
              << where << " element " << 4 * j + r;
    }
  }
#endif
}

// The oracle equals the formula of gemm_quant_dot.h evaluated in double from the same codes (the integer block
// sums exact in both), up to the float additions of the oracle's nb block terms.
TEST(GemmQuantDot, TheOracleIsTheScaledIntegerSums) {
  const int M = 2, N = 4, K = 100, nb = 4;
  const auto A = test::randn(static_cast<size_t>(M) * K, 11);
  for (WeightFormat f : kFormats) {
    const Packed w = pack(f, N, K, 12);
    std::vector<float> C(static_cast<size_t>(M) * N);
    kernels::gemm_quant_int8_act_reference(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), C.data(), N);
    std::vector<int16_t> q(static_cast<size_t>(M) * nb * kDotBlock);
    std::vector<float> d(static_cast<size_t>(M) * nb);
    kernels::quantize_activations(A.data(), K, M, K, f, q.data(), d.data());
    const int spr = ops::scales_per_row(f, K);
    const size_t stride = ops::row_stride(f, K);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double want = 0, mag = 0;
        for (int b = 0; b < nb; ++b) {
          long sum = 0;
          for (int i = 0; i < kDotBlock && b * kDotBlock + i < K; ++i) {
            const int k = b * kDotBlock + i;
            // The code without its scale: dequantize_element with scales of 1 (Int8's fp32 word, Q4's bfloat16).
            float one[64];
            std::fill(one, one + 64, f == WeightFormat::Q4 ? ops::bits_float(0x3f803f80u) : 1.f);
            const int c = static_cast<int>(ops::dequantize_element(f, w.bytes.data() + n * stride, one, k));
            sum += static_cast<long>(c) * q[(static_cast<size_t>(m) * nb + b) * kDotBlock + place(f, i)];
          }
          const double s =
              f == WeightFormat::Q4 ? ops::q4_scale(w.scales.data() + static_cast<size_t>(n) * spr, b) : 1.0;
          const double term = static_cast<double>(sum) * d[static_cast<size_t>(m) * nb + b] * s;
          want += term;
          mag += std::abs(term);
        }
        if (f == WeightFormat::Int8) want *= w.scales[static_cast<size_t>(n)], mag *= w.scales[static_cast<size_t>(n)];
        EXPECT_NEAR(C[static_cast<size_t>(m) * N + n], want, (nb + 3) * 1.2e-7 * mag + 1e-30)
            << ops::format_name(f) << " (" << m << ", " << n << ")";
      }
  }
}

// Every instruction set's kernel (through gemm_quant with int8_act) against the oracle, W read from its row 1 (a
// caller's row offset), C's padding column untouched; past 8 rows of A the permission is not taken and the result is
// the fp32 product's.
TEST(GemmQuantDot, EveryIsaMatchesTheOracleOverRaggedShapes) {
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (WeightFormat f : kFormats)
        for (int M : {1, 2, 3, 4, 5, 8, 9})
          for (int N : {1, 3, 17, 33})
            // 545 .. 2048: AVX-512 VNNI's Q4 kernel sums 16 blocks at a time, in whole groups of four (545: one 16 and
            // 2 blocks left; 768: a 16 and a partial one of two groups; 1100: two 16s and 3 left; 2048: four 16s)
            for (int K : {0, 1, 7, 31, 32, 33, 63, 64, 65, 100, 127, 129, 545, 768, 1100, 2048}) {
              const Packed w = pack(f, N + 1, K, 40 + static_cast<uint64_t>(M * 1000 + N * 10 + K));
              const int lda = K + 3, ldc = N + 1, spr = ops::scales_per_row(f, K);
              const auto A = test::randn(static_cast<size_t>(M) * lda, 50 + static_cast<uint64_t>(K));
              auto C = test::randn(static_cast<size_t>(M) * ldc, 60), want = C;
              const uint8_t* W = w.bytes.data() + ops::row_stride(f, K);
              const float* S = w.scales.data() + spr;
              kernels::gemm_quant(M, N, K, A.data(), lda, f, W, S, C.data(), ldc, true);
              if (M <= 8)
                kernels::gemm_quant_int8_act_reference(M, N, K, A.data(), lda, f, W, S, want.data(), ldc);
              else
                kernels::gemm_quant_reference(M, N, K, A.data(), lda, f, W, S, want.data(), ldc);
              for (int i = 0; i < M; ++i) {
                for (int j = 0; j < N; ++j) {
                  double mag = 0;  // sum |a w| bounds every partial sum's size in both computations
                  for (int k = 0; k < K; ++k)
                    mag += std::abs(A[static_cast<size_t>(i) * lda + k] * w.values[static_cast<size_t>(j + 1) * K + k]);
                  const double tol = 2.0 * (K + 2) * 1.2e-7 * mag * 1.02 + 1e-30;
                  const size_t at = static_cast<size_t>(i) * ldc + j;
                  ASSERT_LE(std::abs(C[at] - want[at]), tol)
                      << "isa=" << isa << " " << ops::format_name(f) << " M=" << M << " N=" << N << " K=" << K
                      << " at (" << i << "," << j << ")";
                }
                ASSERT_EQ(C[static_cast<size_t>(i) * ldc + N], want[static_cast<size_t>(i) * ldc + N]);
              }
            }
    });
  }
  set_num_threads(max_threads());
}

// Against the fp32 product of the same dequantized weights: |C - C32| <= sum_k |w_k| |a_k - q_k d| <= sum_k |w_k|
// d_b / 2, the bound of A's rounding alone (plus fp32 rounding); a NaN in A makes its row's products NaN.
TEST(GemmQuantDot, StaysWithinTheRoundingOfTheActivations) {
  const int M = 2, N = 9, K = 200, nb = 7;
  auto A = test::randn(static_cast<size_t>(M) * K, 70);
  for (WeightFormat f : kFormats) {
    const Packed w = pack(f, N, K, 71);
    std::vector<float> C(static_cast<size_t>(M) * N), C32(C.size());
    test::for_each_isa([&](const std::string& isa) {
      kernels::gemm_quant(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), C.data(), N, true);
      kernels::gemm_quant_reference(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), C32.data(), N);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double bound = 0, mag = 0;
          for (int b = 0; b < nb; ++b) {
            float amax = 0.f;
            for (int k = b * kDotBlock; k < std::min(K, (b + 1) * kDotBlock); ++k)
              amax = std::max(amax, std::abs(A[static_cast<size_t>(m) * K + k]));
            for (int k = b * kDotBlock; k < std::min(K, (b + 1) * kDotBlock); ++k) {
              const double wk = std::abs(w.values[static_cast<size_t>(n) * K + k]);
              bound += wk * amax / 127.0 / 2.0;
              mag += wk * std::abs(A[static_cast<size_t>(m) * K + k]);
            }
          }
          const double err = std::abs(C[static_cast<size_t>(m) * N + n] - C32[static_cast<size_t>(m) * N + n]);
          EXPECT_LE(err, bound + 4.0 * K * 1.2e-7 * mag)
              << isa << " " << ops::format_name(f) << " (" << m << ", " << n << ")";
          EXPECT_GT(err, 0.0) << "the int8 path was not taken: " << isa;
        }
    });
    auto Anan = A;
    Anan[static_cast<size_t>(K) + 150] = std::numeric_limits<float>::quiet_NaN();
    kernels::gemm_quant(M, N, K, Anan.data(), K, f, w.bytes.data(), w.scales.data(), C.data(), N, true);
    for (int n = 0; n < N; ++n) {
      EXPECT_FALSE(std::isnan(C[static_cast<size_t>(n)])) << ops::format_name(f);
      EXPECT_TRUE(std::isnan(C[static_cast<size_t>(N) + n])) << ops::format_name(f);
    }
  }
}

}  // namespace
}  // namespace qkv::gemm_quant_dot_test
