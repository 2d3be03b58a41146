// The CUDA quantized-weight kernels (kernels/cuda/gemm_quant.cuh) on the warp emulator, launched as gemm_quant.cu
// launches them, every packed format, against the CPU's oracle:
//   gemm_quant (the decoding kernel for M <= kGemvMaxM, the tiled one above): gemm_quant_cases.h's check; W at every
//   4-byte offset from a 16-byte boundary (the decoding kernel's head words, uint4 body and tail), A's
//     rows aligned or not (its vector loads), K = 1, 31, 33, 100, 1000 (below, around and past a Q4 group, one word,
//     many uint4s per lane). Few and small shapes: the emulator runs a fiber per thread.
//   dequantize_rows and embedding_forward_quant: bit for bit (each element is dequantize_element's float, the
//     embedding then embedding_forward's multiply and add).
// Outputs start as NaN: an element a kernel fails to write fails the comparison. Padding bytes are garbage
// (gemm_quant_cases.h's PackedMatrix): no kernel may read an element past K.
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "gemm_quant_cases.h"
#include "kernels/cuda/gemm_quant.cuh"  // nvcc's #pragma unroll: -Wno-unknown-pragmas here (CMakeLists.txt)
#include "kernels/kernels.h"
#include "test_util.h"

namespace qkv::gemm_quant_emulation_test {
namespace {

namespace kc = kernels::cuda;
using ops::WeightFormat;
using test::PackedMatrix;
using test::randn;

// fn.template operator()<F>() with the format as a template argument (the kernels' instances).
template <class Fn>
void with_format(WeightFormat f, Fn&& fn) {
  switch (f) {
    case WeightFormat::F16: return fn.template operator()<WeightFormat::F16>();
    case WeightFormat::BF16: return fn.template operator()<WeightFormat::BF16>();
    case WeightFormat::Int8: return fn.template operator()<WeightFormat::Int8>();
    default: return fn.template operator()<WeightFormat::Q4>();
  }
}

TEST(GemmQuantEmulated, BothProductsMatchTheDequantizedFp32Product) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 360;
  // (M, N, K, lda, W's offset past a 16-byte boundary): the decoding kernel (M <= 8: one pass of 4 rows of A, two, a
  // partial one; rows of one word, of a group and a bit, of many uint4s per lane at each offset; lda a multiple of 4
  // or not), then the tiled one (a partial tile, several tiles each way).
  struct Shape {
    int M, N, K, lda;
    size_t offset;
  };
  const Shape shapes[] = {{1, 17, 1, 4, 0},      {1, 3, 31, 34, 4},     {3, 9, 33, 36, 8},     {5, 17, 100, 103, 12},
                          {8, 9, 1000, 1000, 0}, {1, 9, 1000, 1003, 4}, {2, 9, 1000, 1004, 8}, {4, 9, 1000, 1003, 12},
                          {9, 17, 33, 36, 0},    {67, 3, 100, 103, 4},  {67, 67, 31, 34, 8},   {9, 3, 1000, 1003, 12}};
  int vector_launches = 0;
  for (WeightFormat f : test::kPackedFormats)
    for (const auto& [M, N, K, lda, offset] : shapes) {
      SCOPED_TRACE(::testing::Message() << ops::format_name(f) << " M " << M << " N " << N << " K " << K << " lda "
                                        << lda << " W at 16n + " << offset);
      const PackedMatrix w(f, N, K, seed++, offset);
      const int ldc = N + 2;
      const auto A = randn(static_cast<size_t>(M) * lda, seed++);
      std::vector<float> C(static_cast<size_t>(M) * ldc, std::nanf(""));
      if (M <= kc::kGemvMaxM) {
        const unsigned blocks = static_cast<unsigned>((N + kc::kGemvWarps - 1) / kc::kGemvWarps);
        // the host's choice (gemm_quant.cu): vector loads of A where its rows are 16-byte aligned
        const bool vec = reinterpret_cast<uintptr_t>(A.data()) % 16 == 0 && lda % 4 == 0;
        vector_launches += vec;
        emu::launch({blocks, 1, 1}, kc::kGemvWarps * kc::kWarp, 0, [&] {
          with_format(f, [&]<WeightFormat F>() {
            if (vec)
              kc::gemv_quant_kernel<F, true>(M, N, K, A.data(), lda, w.data, w.scales.data(), C.data(), ldc);
            else
              kc::gemv_quant_kernel<F, false>(M, N, K, A.data(), lda, w.data, w.scales.data(), C.data(), ldc);
          });
        });
      } else {
        const emu::Dim3 grid{static_cast<unsigned>((N + kc::kTile - 1) / kc::kTile),
                             static_cast<unsigned>((M + kc::kTile - 1) / kc::kTile), 1};
        emu::launch(grid, kc::kTileThreads, 0, [&] {
          with_format(f, [&]<WeightFormat F>() {
            kc::gemm_quant_tiled_kernel<F>(M, N, K, A.data(), lda, w.data, w.scales.data(), C.data(), ldc);
          });
        });
      }
      ASSERT_TRUE(test::gemm_quant_matches(C, M, N, K, A, lda, ldc, w));
    }
  EXPECT_GT(vector_launches, 0);  // both instances of the decoding kernel ran
}

TEST(GemmQuantEmulated, DequantizeRowsGivesEachElementsFloat) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 361;
  const int rows = 3;
  for (WeightFormat f : test::kPackedFormats)
    for (int K : {31, 33, 100}) {
      SCOPED_TRACE(::testing::Message() << ops::format_name(f) << " rows " << rows << " K " << K);
      const PackedMatrix w(f, rows, K, seed++, 4);
      const int ld = K + 1;
      std::vector<float> out(static_cast<size_t>(rows) * ld, std::nanf(""));
      emu::launch({1, 1, 1}, kc::kQuantThreads, 0, [&] {  // one block: the grid-stride loop covers the rest
        with_format(f, [&]<WeightFormat F>() {
          kc::dequantize_rows_kernel<F>(out.data(), ld, w.data, w.scales.data(), rows, K);
        });
      });
      ASSERT_TRUE(test::dequantized_rows_match(out, rows, K, w));
    }
}

TEST(GemmQuantEmulated, EmbeddingForwardQuantEqualsTheCpuBitForBit) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 362;
  for (WeightFormat f : test::kPackedFormats)
    for (int C : {1, 33, 100}) {
      const bool with_pos = C != 33;  // positions, or none
      const int V = 7, B = 2, T = 5;
      SCOPED_TRACE(::testing::Message() << ops::format_name(f) << " C " << C << (with_pos ? "" : " no pos"));
      const PackedMatrix wte(f, V, C, seed++, 0);
      std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 5 + 3) % V);
      const auto pos = randn(static_cast<size_t>(T + 2) * C, seed++);
      const float scale = 1.5f;
      std::vector<float> want(tokens.size() * C), got(want.size(), std::nanf(""));
      kernels::embedding_forward_quant(want, tokens.data(), f, wte.data, wte.scales.data(),
                                       with_pos ? CSpan(pos) : CSpan(), scale, B, T, C);
      emu::launch({2, 1, 1}, kc::kQuantThreads, 0, [&] {
        const float* p = with_pos ? pos.data() : nullptr;
        with_format(f, [&]<WeightFormat F>() {
          kc::embedding_forward_quant_kernel<F>(got.data(), tokens.data(), wte.data, wte.scales.data(), p, scale, B * T,
                                                T, C);
        });
      });
      EXPECT_EQ(got, want);
    }
}

}  // namespace
}  // namespace qkv::gemm_quant_emulation_test
