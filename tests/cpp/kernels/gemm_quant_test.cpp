// gemm_quant (kernels/cpu/gemm_quant.cpp) against a double-precision product of the dequantized weights, over ragged
// shapes around the kernels' blocks (R * V elements: 8 .. 128 along K, the Q4 groups of 32), both paths (the row
// kernels up to 8 rows of A, the dequantized panels and the fp32 gemm past them), every format, every instruction
// set this machine has (forced) and 1..2 threads; and the instruction sets' dequantization, element for element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_quant_kernel.h"
#include "kernels/kernels.h"
#include "ops/weight_quantize.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::gemm_quant_test {
namespace {

using ops::WeightFormat;
constexpr WeightFormat kFormats[] = {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4};

struct Packed {
  std::vector<uint8_t> bytes;
  std::vector<float> scales, values;  // values: the dequantized (rows, K)
};
// rows of K quantized from N(0, 1) with an all-zero row 0 and an all-zero first group in row 1.
Packed pack(WeightFormat f, int rows, int K, uint64_t seed) {
  auto w = test::randn(static_cast<size_t>(rows) * K, seed);
  for (int k = 0; k < K; ++k) w[static_cast<size_t>(k)] = 0.f;
  if (rows > 1)
    for (int k = 0; k < std::min(K, 32); ++k) w[static_cast<size_t>(K) + k] = 0.f;
  Packed p{std::vector<uint8_t>(ops::packed_bytes(f, rows, K)),
           std::vector<float>(static_cast<size_t>(rows) * ops::scales_per_row(f, K) + 1),
           {}};
  ops::quantize_rows(f, w.data(), rows, K, p.bytes.data(), p.scales.data());
  p.values.resize(w.size());
  ops::dequantize_rows_host(f, p.bytes.data(), p.scales.data(), rows, K, p.values.data());
  return p;
}

// C against sum_k a deq(w) in double, with the classic bound |err| <= gamma_K * sum |a||w|; W is read from its row 1
// (a caller's row offset) and the padding columns of C stay as they were.
void check_case(WeightFormat f, int M, int N, int K, const std::string& isa) {
  const Packed w = pack(f, N + 1, K, 10 + static_cast<uint64_t>(M * 1000 + N * 10 + K));
  const int lda = K + 3, ldc = N + 1;
  const auto A = test::randn(static_cast<size_t>(M) * lda, 20 + static_cast<uint64_t>(K));
  auto C = test::randn(static_cast<size_t>(M) * ldc, 30);
  const auto C0 = C;
  const int spr = ops::scales_per_row(f, K);
  kernels::gemm_quant(M, N, K, A.data(), lda, f, w.bytes.data() + ops::row_stride(f, K), w.scales.data() + spr,
                      C.data(), ldc);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double t =
            static_cast<double>(A[static_cast<size_t>(i) * lda + k]) * w.values[static_cast<size_t>(j + 1) * K + k];
        ref += t;
        mag += std::abs(t);
      }
      const double tol = 2.0 * (K + 2) * 1.2e-7 * mag + 1e-30;
      const double got = C[static_cast<size_t>(i) * ldc + j];
      ASSERT_LE(std::abs(got - ref), tol)
          << "isa=" << isa << " " << ops::format_name(f) << " M=" << M << " N=" << N << " K=" << K << " at (" << i
          << "," << j << ") got " << got << " expected " << ref;
    }
    ASSERT_EQ(C[static_cast<size_t>(i) * ldc + N], C0[static_cast<size_t>(i) * ldc + N]);
  }
}

TEST(GemmQuant, MatchesDoubleReferenceOverRaggedShapesOnEveryIsa) {
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (WeightFormat f : kFormats)
        for (int M : {1, 2, 3, 4, 5, 8, 9, 17})
          for (int N : {1, 3, 17, 33})
            for (int K : {0, 1, 7, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 256, 257, 768})
              check_case(f, M, N, K, isa);
    });
  }
  set_num_threads(max_threads());
}

// Each element of C is the same float wherever its row of W falls: a row kernel may take rows of W a group at a time
// (AVX-512's Q4, 4 rows when A has one), so a product of 40 rows (groups and a part, split over 1 or 2 threads) must
// give each element exactly what the product of that row alone gives, on every instruction set, for 1 and 3 rows of
// A, for K with whole blocks only (768), groups past the blocks (100, 200, 4160: four rows' scales past the stack's
// room) and elements past the groups (33, 200).
TEST(GemmQuant, EachRowIsTheSameSumWhereverItFalls) {
  const int N = 40;
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (WeightFormat f : kFormats)
        for (int K : {33, 64, 100, 200, 768, 4160})
          for (int M : {1, 3}) {
            const Packed w = pack(f, N, K, 80 + static_cast<uint64_t>(K));
            const auto A = test::randn(static_cast<size_t>(M) * K, 81);
            const size_t stride = ops::row_stride(f, K);
            const int spr = ops::scales_per_row(f, K);
            std::vector<float> C(static_cast<size_t>(M) * N), alone(static_cast<size_t>(M));
            kernels::gemm_quant(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), C.data(), N);
            for (int n = 0; n < N; ++n) {
              kernels::gemm_quant(M, 1, K, A.data(), K, f, w.bytes.data() + n * stride,
                                  w.scales.data() + static_cast<size_t>(n) * spr, alone.data(), 1);
              for (int m = 0; m < M; ++m)
                ASSERT_EQ(ops::float_bits(C[static_cast<size_t>(m) * N + n]), ops::float_bits(alone[m]))
                    << "isa=" << isa << " " << ops::format_name(f) << " K=" << K << " M=" << M << " row " << n
                    << " threads " << threads;
            }
          }
    });
  }
  set_num_threads(max_threads());
}

// The epilogue (linear_quant_forward on the CPU) is bias_act_forward after the product, bit for bit, applied to each
// piece of C as the threads make it: every activation, with and without a bias, a separate output and in place, on
// the row paths (fp32 and int8 activations; N cut into pieces of 16) and the panel path, every instruction set.
TEST(GemmQuant, TheEpilogueIsBiasActAfterTheProduct) {
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (WeightFormat f : {WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4})
        for (bool int8_act : {false, true})
          for (int M : {1, 3, 9})
            for (int N : {5, 67})
              for (ops::Act act : {ops::Act::Identity, ops::Act::ReLU, ops::Act::GELU, ops::Act::GELUTanh})
                for (bool bias : {false, true}) {
                  if (int8_act && f == WeightFormat::BF16) continue;
                  const int K = 100;
                  const Packed w = pack(f, N, K, 90 + static_cast<uint64_t>(N + M));
                  const auto A = test::randn(static_cast<size_t>(M) * K, 91);
                  const auto b = test::randn(static_cast<size_t>(N), 92);
                  const size_t n = static_cast<size_t>(M) * N;
                  std::vector<float> h_want(n), a_want(n), h(n, 7.f), a(n, 7.f);
                  kernels::gemm_quant(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), h_want.data(), N,
                                      int8_act);
                  const bool in_place = act == ops::Act::Identity;
                  float* a_out = in_place ? h.data() : a.data();
                  kernels::bias_act_forward(in_place ? Span(h_want) : Span(a_want), Span(h_want),
                                            bias ? CSpan(b) : CSpan(), act, M, N);
                  const kernels::QuantEpilogue e{a_out, bias ? b.data() : nullptr, act};
                  kernels::gemm_quant(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), h.data(), N, int8_act,
                                      &e);
                  for (size_t i = 0; i < n; ++i) {
                    const std::string where = "isa=" + isa + " " + ops::format_name(f) + (int8_act ? " a8" : "") +
                                              " M=" + std::to_string(M) + " N=" + std::to_string(N) + " act " +
                                              std::to_string(static_cast<int>(act)) + (bias ? " bias" : "") + " at " +
                                              std::to_string(i);
                    ASSERT_EQ(ops::float_bits(h[i]), ops::float_bits(h_want[i])) << where;
                    if (!in_place) {
                      ASSERT_EQ(ops::float_bits(a[i]), ops::float_bits(a_want[i])) << where;
                    }
                  }
                }
    });
  }
  set_num_threads(max_threads());
}

// The panel path multiplies A as it is, whatever its size (it once copied A into block order, at most 4 MiB of it at a
// time): products with more than 1 Mi floats of A, on every instruction set, meet the reference's bound, with K
// ragged against every block (3000 = 93 x 32 + 24) and panels ragged against the last (N = 1000); and a prompt's 32
// rows, whose panels (384 x 768) the gemm turns around, the last (332 rows) not.
TEST(GemmQuant, ThePanelPathTakesALargeAAsItIs) {
  for (const WeightFormat f : kFormats)
    test::for_each_isa([&](const std::string& isa) {
      check_case(f, 701, 5, 3000, isa);
      check_case(f, 64, 1000, 200, isa);
      check_case(f, 32, 1100, 768, isa);
    });
}

TEST(GemmQuant, TheNaiveOracleIsTheDequantizedProduct) {
  for (WeightFormat f : kFormats) {
    const int M = 3, N = 5, K = 70;
    const Packed w = pack(f, N, K, 7);
    const auto A = test::randn(static_cast<size_t>(M) * K, 8);
    std::vector<float> C(static_cast<size_t>(M) * N);
    kernels::gemm_quant_reference(M, N, K, A.data(), K, f, w.bytes.data(), w.scales.data(), C.data(), N);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        float acc = 0.f;  // the same float operations in the same order
        for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(i) * K + k] * w.values[static_cast<size_t>(j) * K + k];
        EXPECT_EQ(C[static_cast<size_t>(i) * N + j], acc) << ops::format_name(f);
      }
  }
}

// Each instruction set's dequantization (the panels of the gemm path) gives dequantize_element's float for every
// element, in natural order (each block interleaved in registers): every half and bfloat16 code (subnormals,
// infinities, NaN), every int8 and Q4 code.
TEST(GemmQuant, EveryIsaDequantizesEveryCodeExactly) {
  // One row of K = 65536 halves: element k is code k.
  const int K = 65536;
  std::vector<uint8_t> halves(2 * K);
  for (int k = 0; k < K; ++k)
    halves[2 * static_cast<size_t>(k)] = static_cast<uint8_t>(k),
               halves[2 * static_cast<size_t>(k) + 1] = static_cast<uint8_t>(k >> 8);
  // An int8 row of every byte with scale 0.37, a Q4 row of every code in every position with its groups' scales.
  std::vector<uint8_t> bytes(1024);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 256);
  std::vector<float> scales(64);
  for (size_t g = 0; g < scales.size(); ++g) scales[g] = 0.37f * static_cast<float>(g + 1) * (g % 2 ? -1.f : 1.f);
  test::for_each_isa([&](const std::string& isa) {
    const kernels::QuantKernels qk = kernels::select_quant_kernels();
    const auto check = [&](WeightFormat f, const uint8_t* row, int k_count) {
      std::vector<float> out(static_cast<size_t>(k_count));
      qk.dequantize(f, row, scales.data(), k_count, out.data());
      for (int k = 0; k < k_count; ++k) {
        const float want = ops::dequantize_element(f, row, scales.data(), k), got = out[static_cast<size_t>(k)];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << isa << " " << ops::format_name(f) << " k " << k;
        } else {
          ASSERT_EQ(ops::float_bits(got), ops::float_bits(want)) << isa << " " << ops::format_name(f) << " k " << k;
        }
      }
    };
    check(WeightFormat::F16, halves.data(), K);
    check(WeightFormat::BF16, halves.data(), K);
    check(WeightFormat::Int8, bytes.data(), 1024);
    check(WeightFormat::Q4, bytes.data(), 2048);
    check(WeightFormat::Q4, bytes.data(), 2047);  // a ragged tail
  });
}

}  // namespace
}  // namespace qkv::gemm_quant_test
