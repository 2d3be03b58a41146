// The CUDA quantized-weight kernels (kernels/cuda/gemm_quant.cuh) on the warp emulator, against the CPU's naive
// kernels: the product (its k-order fp32 sum is the oracle's), dequantize_rows and the embedding bit for bit, for
// every format, on ragged shapes, with a row offset into W (a caller's n0 * row_stride) and a grid smaller than the
// work (the grid-stride loops).
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/gemm_quant.cuh"
#include "kernels/kernels.h"
#include "ops/weight_quantize.h"
#include "test_util.h"

namespace qkv {
namespace {

namespace kc = kernels::cuda;
using ops::WeightFormat;

struct Packed {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};
Packed pack(WeightFormat f, int rows, int K, uint64_t seed) {
  auto w = test::randn(static_cast<size_t>(rows) * K, seed);
  for (int k = 0; k < K; ++k) w[static_cast<size_t>(k)] = 0.f;  // an all-zero row
  Packed p{std::vector<uint8_t>(ops::packed_bytes(f, rows, K)),
           std::vector<float>(static_cast<size_t>(rows) * ops::scales_per_row(f, K) + 1)};
  ops::quantize_rows(f, w.data(), rows, K, p.bytes.data(), p.scales.data());
  return p;
}

TEST(GemmQuantEmulated, TheKernelsMatchTheCpuReference) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 70;
  for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4})
    for (int K : {1, 33, 100})
      for (int M : {1, 3})
        for (int N : {1, 7}) {
          SCOPED_TRACE(::testing::Message() << ops::format_name(f) << " M " << M << " N " << N << " K " << K);
          const Packed w = pack(f, N + 1, K, seed++);
          const uint8_t* W = w.bytes.data() + ops::row_stride(f, K);  // rows [1, N]
          const float* S = w.scales.data() + ops::scales_per_row(f, K);
          const int lda = K + 2, ldc = N + 1;
          const auto A = test::randn(static_cast<size_t>(M) * lda, seed++);
          std::vector<float> got(static_cast<size_t>(M) * ldc, 0.f), want = got;
          emu::launch({1, 1, 1}, 32, 0,
                      [&] { kc::gemm_quant_kernel(M, N, K, A.data(), lda, f, W, S, got.data(), ldc); });
          kernels::gemm_quant_reference(M, N, K, A.data(), lda, f, W, S, want.data(), ldc);
          EXPECT_TRUE(test::near("C", got, want, 1e-6, false));

          std::vector<float> out(static_cast<size_t>(N) * (K + 1), 0.f), out_want = out;
          emu::launch({2, 1, 1}, 32, 0, [&] { kc::dequantize_rows_kernel(out.data(), K + 1, f, W, S, N, K); });
          kernels::dequantize_rows(out_want.data(), K + 1, f, W, S, N, K);
          EXPECT_EQ(out, out_want);
        }
  for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4})
    for (int C : {1, 33, 100}) {
      const int V = 5, B = 2, T = 3;
      const Packed wte = pack(f, V, C, seed++);
      const auto pos = test::randn(static_cast<size_t>(T) * C, seed++);
      std::vector<int32_t> tok(static_cast<size_t>(B) * T);
      for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 2 + 1) % V);
      for (bool with_pos : {true, false}) {
        const size_t n = tok.size() * C;
        std::vector<float> got(n, std::nanf("")), want(n);
        emu::launch({1, 1, 1}, 64, 0, [&] {
          kc::embedding_forward_quant_kernel(got.data(), tok.data(), f, wte.bytes.data(), wte.scales.data(),
                                             with_pos ? pos.data() : nullptr, 1.3f, T, C, n);
        });
        kernels::embedding_forward_quant(want, tok.data(), f, wte.bytes.data(), wte.scales.data(),
                                         with_pos ? CSpan(pos) : CSpan(), 1.3f, B, T, C);
        EXPECT_EQ(got, want) << ops::format_name(f) << " C " << C << (with_pos ? "" : " (no positions)");
      }
    }
}

}  // namespace
}  // namespace qkv
