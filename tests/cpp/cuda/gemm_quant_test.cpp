// The CUDA quantized-weight ops (kernels/cuda/gemm_quant.cu) against the CPU's oracle, every packed format, on
// ragged shapes: one row, odd widths, K below, around and past a Q4 group (1, 31, 33, 100) and long rows (1000,
// 3072: many 16-byte pieces per lane); M on both sides of the decoding kernel's limit (8) and past one tile (67,
// 257); the packed rows at every 4-byte offset from a 16-byte boundary (the decoding kernel's head words, uint4 body
// and tail), their padding filled with garbage that a read past K would show.
//   gemm_quant, dequantize_rows: gemm_quant_cases.h's checks (shared with the emulator's test);
//   embedding_forward_quant: bit for bit with the CPU (dequantize_element's floats; unfused multiply and add).
// The GPU tests skip without a device (listed as not yet run on one in kernels/cuda/README.md); the host checks run
// everywhere CUDA is built.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "cuda_test_util.h"
#include "gemm_quant_cases.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace qkv::cuda_gemm_quant_test {
namespace {

namespace kc = kernels::cuda;
using ops::WeightFormat;
using test::DeviceBuffers;
using test::download;
using test::message_of;
using test::PackedMatrix;
using test::poison;
using test::randn;

TEST(CudaQuantOps, GemmQuantMatchesTheDequantizedProduct) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 3600;
  for (WeightFormat f : test::kPackedFormats)
    for (int M : {1, 3, 8, 9, 67, 257})
      for (int N : {1, 3, 17, 67, 257})
        for (int K : {1, 31, 33, 100, 1000, 3072}) {
          const size_t offset = 4 * static_cast<size_t>((M + N + K) % 4);  // bytes past the buffer's 256-byte start
          SCOPED_TRACE(::testing::Message()
                       << ops::format_name(f) << " M " << M << " N " << N << " K " << K << " W at +" << offset);
          const PackedMatrix w(f, N, K, seed++);
          const int lda = K + 3, ldc = N + 2;
          const auto A = randn(static_cast<size_t>(M) * lda, seed++);
          DeviceBuffers d({A.size(), w.scales.size(), static_cast<size_t>(M) * ldc}, {}, {w.bytes + offset});
          kc::upload(d.f[0], A, "test");
          kc::upload(d.f[1], w.scales, "test");
          poison(d.f[2], static_cast<size_t>(M) * ldc);
          test::upload_bytes(d.b[0] + offset, w.data, w.bytes);
          kc::gemm_quant(M, N, K, d.f[0], lda, f, d.b[0] + offset, d.f[1], d.f[2], ldc);
          ASSERT_TRUE(
              test::gemm_quant_matches(download(d.f[2], static_cast<size_t>(M) * ldc), M, N, K, A, lda, ldc, w));
        }
}

TEST(CudaQuantOps, DequantizeRowsAndTheEmbeddingEqualTheCpuBitForBit) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 3700;
  for (WeightFormat f : test::kPackedFormats)
    for (int K : {1, 31, 33, 100, 768}) {
      SCOPED_TRACE(::testing::Message() << ops::format_name(f) << " K " << K);
      const int rows = 67, ld = K + 1, B = 3, T = 17;
      const PackedMatrix w(f, rows, K, seed++);
      std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 2) % rows);
      const auto pos = randn(static_cast<size_t>(T) * K, seed++);
      DeviceBuffers d({w.scales.size(), static_cast<size_t>(rows) * ld, tokens.size() * K, pos.size()}, {tokens.size()},
                      {w.bytes});
      kc::upload(d.f[0], w.scales, "test");
      kc::upload(d.f[3], pos, "test");
      test::upload_bytes(d.b[0], w.data, w.bytes);
      kc::upload_ids(d.i[0], tokens, rows, std::nullopt, "test", "tokens");

      poison(d.f[1], static_cast<size_t>(rows) * ld);
      kc::dequantize_rows(d.f[1], ld, f, d.b[0], d.f[0], rows, K);
      ASSERT_TRUE(test::dequantized_rows_match(download(d.f[1], static_cast<size_t>(rows) * ld), rows, K, w));

      for (bool with_pos : {true, false}) {
        std::vector<float> want(tokens.size() * K);
        kernels::embedding_forward_quant(want, tokens.data(), f, w.data, w.scales.data(),
                                         with_pos ? CSpan(pos) : CSpan(), 1.5f, B, T, K);
        poison(d.f[2], want.size());
        kc::embedding_forward_quant(d.f[2], d.i[0], f, d.b[0], d.f[0], with_pos ? d.f[3] : nullptr, 1.5f, B, T, K);
        EXPECT_EQ(download(d.f[2], want.size()), want) << (with_pos ? "with positions" : "without positions");
      }
    }
}

// Host checks: these throw before any launch, so they run on machines without a GPU too.
TEST(CudaQuantHost, BadArgumentsAreRefusedBeforeAnyLaunch) {
  alignas(16) static uint8_t W[64] = {};
  static float scales[4] = {}, A[8] = {}, C[8] = {};
  const auto has = [](const std::string& m, const char* part) { return m.find(part) != std::string::npos; };
  std::string m = message_of([&] { kc::gemm_quant(1, 1, 4, A, 4, WeightFormat::F32, W, scales, C, 1); });
  EXPECT_TRUE(has(m, "gemm_quant (cuda): format = 0: expected a packed format")) << m;
  m = message_of([&] { kc::gemm_quant(1, 1, 4, A, 4, WeightFormat::Int8, W + 2, scales, C, 1); });
  EXPECT_TRUE(has(m, "gemm_quant (cuda): packed weights at ")) << m;
  EXPECT_TRUE(has(m, "expected a 4-byte aligned address")) << m;
  m = message_of([&] { kc::gemm_quant(1, 1, 4, A, 4, WeightFormat::Q4, W, nullptr, C, 1); });
  EXPECT_TRUE(has(m, "gemm_quant (cuda): null scales for format 4")) << m;
  m = message_of([&] { kc::gemm_quant(1, 1, 4, A, 3, WeightFormat::Int8, W, scales, C, 1); });
  EXPECT_TRUE(has(m, "gemm_quant (cuda): lda = 3, ldc = 1: expected lda >= K = 4")) << m;
  m = message_of([&] { kc::dequantize_rows(C, 2, WeightFormat::BF16, W, nullptr, 1, 4); });
  EXPECT_TRUE(has(m, "dequantize_rows (cuda): rows = 1, K = 4, ld_out = 2")) << m;
  m = message_of([&] {
    kc::embedding_forward_quant(C, reinterpret_cast<const int32_t*>(W), static_cast<WeightFormat>(7), W, scales,
                                nullptr, 1.f, 1, 1, 4);
  });
  EXPECT_TRUE(has(m, "embedding_forward_quant (cuda): format = 7")) << m;
}

}  // namespace
}  // namespace qkv::cuda_gemm_quant_test
