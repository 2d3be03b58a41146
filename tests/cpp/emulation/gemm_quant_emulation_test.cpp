// The CUDA quantized-weight kernels (kernels/cuda/gemm_quant.cuh) on the warp emulator, launched as gemm_quant.cu
// launches them, every packed format, against the CPU's oracle:
//   gemm_quant (the decoding kernel for M <= kGemvMaxM, the tiled one above): |got - want| <= 1e-5 * sum_k |a||w|,
//     gemm's check (the same products of the same dequantized floats, summed in another order), want in double;
//     W at every 4-byte offset from a 16-byte boundary (the decoding kernel's head words, uint4 body and tail), A's
//     rows aligned or not (its vector loads), K = 1, 31, 33, 100, 1000 (below, around and past a Q4 group, one word,
//     many uint4s per lane). Few and small shapes: the emulator runs a fiber per thread.
//   dequantize_rows and embedding_forward_quant: bit for bit (each element is dequantize_element's float, the
//     embedding then embedding_forward's multiply and add).
// Outputs start as NaN: an element a kernel fails to write fails the comparison. Padding bytes are filled with
// garbage (0xA5, a NaN-ish half, code 10 of Q4): no kernel may read an element past K.
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/gemm_quant.cuh"  // nvcc's #pragma unroll: -Wno-unknown-pragmas here (CMakeLists.txt)
#include "kernels/kernels.h"
#include "ops/weight_quantize.h"
#include "test_util.h"

namespace qkv {
namespace {

namespace kc = kernels::cuda;
using ops::WeightFormat;
using test::randn;

constexpr WeightFormat kFormats[] = {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4};

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

// A packed (N, K) matrix at `offset` bytes past a 16-byte boundary, its padding overwritten with garbage.
struct PackedMatrix {
  std::vector<uint8_t> storage;
  std::vector<float> scales, dequantized;
  const uint8_t* data = nullptr;
  PackedMatrix(WeightFormat f, int N, int K, uint64_t seed, size_t offset) {
    const size_t stride = ops::row_stride(f, K);
    storage.assign(ops::packed_bytes(f, N, K) + 32, 0);
    const uintptr_t at = reinterpret_cast<uintptr_t>(storage.data());
    uint8_t* p = storage.data() + ((16 - at % 16) % 16) + offset;
    scales.assign(static_cast<size_t>(N) * ops::scales_per_row(f, K) + 1, std::nanf(""));
    const auto w = randn(static_cast<size_t>(N) * K, seed);
    ops::quantize_rows(f, w.data(), N, K, p, scales.data());
    dequantized.resize(w.size());
    ops::dequantize_rows_host(f, p, scales.data(), N, K, dequantized.data());
    // garbage in every padding byte: the elements past K must never be used
    for (int n = 0; n < N; ++n) {
      uint8_t* row = p + static_cast<size_t>(n) * stride;
      if (f == WeightFormat::Q4) {
        for (int k = K; k < static_cast<int>(2 * stride); ++k)
          row[k / 2] = static_cast<uint8_t>(k % 2 ? (row[k / 2] & 0x0f) | 0xa0 : (row[k / 2] & 0xf0) | 0x0a);
      } else {
        const size_t used = f == WeightFormat::Int8 ? static_cast<size_t>(K) : 2 * static_cast<size_t>(K);
        for (size_t b = used; b < stride; ++b) row[b] = 0xff;  // 0xffff: a NaN as a half and as a bf16
      }
    }
    data = p;
  }
};

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
  for (WeightFormat f : kFormats)
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
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < ldc; ++n) {
          const float got = C[static_cast<size_t>(m) * ldc + n];
          if (n >= N) {
            ASSERT_TRUE(std::isnan(got)) << "C[" << m << ", " << n << "] past N was written";
            continue;
          }
          double want = 0, scale = 0;
          for (int k = 0; k < K; ++k) {
            const double a = A[static_cast<size_t>(m) * lda + k], x = w.dequantized[static_cast<size_t>(n) * K + k];
            want += a * x;
            scale += std::abs(a * x);
          }
          ASSERT_NEAR(got, want, 1e-5 * std::max(scale, 1e-30)) << "C[" << m << ", " << n << "]";
        }
    }
  EXPECT_GT(vector_launches, 0);  // both instances of the decoding kernel ran
}

TEST(GemmQuantEmulated, DequantizeRowsGivesEachElementsFloat) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 361;
  const int rows = 3;
  for (WeightFormat f : kFormats)
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
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < ld; ++k) {
          const float got = out[static_cast<size_t>(r) * ld + k];
          if (k == K) {
            ASSERT_TRUE(std::isnan(got)) << "out[" << r << ", " << k << "] past K was written";
          } else {
            ASSERT_EQ(got, w.dequantized[static_cast<size_t>(r) * K + k]) << "out[" << r << ", " << k << "]";
          }
        }
    }
}

TEST(GemmQuantEmulated, EmbeddingForwardQuantEqualsTheCpuBitForBit) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 362;
  for (WeightFormat f : kFormats)
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
}  // namespace qkv
