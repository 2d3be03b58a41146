// The host side of the quantized-weight kernels (gemm_quant.cuh has the kernels and the layouts): the checks, the
// choice between the decoding and the tiled product, and one instance of each kernel per packed format.
//
// Why the prefill product is a tiled kernel of its own rather than "dequantize W, then cuBLAS": the dequantized
// matrix would need N * K floats of workspace (154 MB for GPT-2's tied head), which is the memory the formats
// exist to save, and a pass that writes and rereads them; dequantizing a 64 x 32 tile into shared memory costs
// nothing extra in memory and reads W once per 64 rows of A. It runs on the CUDA cores in fp32 (not TF32 or bf16
// tensor cores): the op's contract is gemm's fp32 arithmetic on the dequantized W.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_quant.cuh"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

// Calls f(std::integral_constant-like tag) with the format as a template argument.
template <class Fn>
void with_format(WeightFormat format, const char* op, Fn&& fn) {
  switch (format) {
    case WeightFormat::F16: return fn.template operator()<WeightFormat::F16>();
    case WeightFormat::BF16: return fn.template operator()<WeightFormat::BF16>();
    case WeightFormat::Int8: return fn.template operator()<WeightFormat::Int8>();
    case WeightFormat::Q4: return fn.template operator()<WeightFormat::Q4>();
    case WeightFormat::F32: break;
  }
  throw Error(detail::cat(op, " (cuda): format = ", static_cast<int>(format),
                          ": expected a packed format (1 f16, 2 bf16, 3 int8, 4 q4)"));
}

void check_packed(const char* op, WeightFormat format, const uint8_t* W, const float* scales, int K) {
  check(W != nullptr, op, " (cuda): null packed weights");
  check(reinterpret_cast<uintptr_t>(W) % 4 == 0, op, " (cuda): packed weights at ", static_cast<const void*>(W),
        ": expected a 4-byte aligned address (packed rows are u32-aligned)");
  check(ops::scales_per_row(format, K) == 0 || scales != nullptr, op, " (cuda): null scales for format ",
        static_cast<int>(format));
}

}  // namespace

void gemm_quant(int M, int N, int K, const float* A, int lda, WeightFormat format, const uint8_t* W,
                const float* scales, float* C, int ldc) {
  const char* op = "gemm_quant";
  check(M >= 0 && N >= 0 && K >= 0, op, " (cuda): M = ", M, ", N = ", N, ", K = ", K, ": expected >= 0");
  check(lda >= K && ldc >= N, op, " (cuda): lda = ", lda, ", ldc = ", ldc, ": expected lda >= K = ", K,
        " and ldc >= N = ", N);
  if (M == 0 || N == 0) return;
  check(C != nullptr && (K == 0 || A != nullptr), op, " (cuda): null device pointer");
  if (K > 0) check_packed(op, format, W, scales, K);
  with_format(format, op, [&]<WeightFormat F>() {
    if (M <= kGemvMaxM) {
      const unsigned blocks = static_cast<unsigned>((N + kGemvWarps - 1) / kGemvWarps);
      if (reinterpret_cast<uintptr_t>(A) % 16 == 0 && lda % 4 == 0)  // A's rows 16-byte aligned: vector loads
        gemv_quant_kernel<F, true><<<blocks, kGemvWarps * kWarp, 0, stream()>>>(M, N, K, A, lda, W, scales, C, ldc);
      else
        gemv_quant_kernel<F, false><<<blocks, kGemvWarps * kWarp, 0, stream()>>>(M, N, K, A, lda, W, scales, C, ldc);
    } else {
      const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile), static_cast<unsigned>((M + kTile - 1) / kTile));
      gemm_quant_tiled_kernel<F><<<grid, kTileThreads, 0, stream()>>>(M, N, K, A, lda, W, scales, C, ldc);
    }
  });
  check_launch(op);
}

void dequantize_rows(float* out, int ld_out, WeightFormat format, const uint8_t* W, const float* scales, int rows,
                     int K) {
  const char* op = "dequantize_rows";
  check(rows >= 0 && K >= 0 && ld_out >= K, op, " (cuda): rows = ", rows, ", K = ", K, ", ld_out = ", ld_out,
        ": expected rows, K >= 0 and ld_out >= K");
  if (rows == 0 || K == 0) return;
  check(out != nullptr, op, " (cuda): null device pointer");
  check_packed(op, format, W, scales, K);
  with_format(format, op, [&]<WeightFormat F>() {
    const size_t words = static_cast<size_t>(rows) * ((static_cast<size_t>(K) + Packed<F>::kV - 1) / Packed<F>::kV);
    dequantize_rows_kernel<F>
        <<<grid_for(words, kQuantThreads), kQuantThreads, 0, stream()>>>(out, ld_out, W, scales, rows, K);
  });
  check_launch(op);
}

void embedding_forward_quant(float* x, const int32_t* tokens, WeightFormat format, const uint8_t* wte,
                             const float* wte_scales, const float* pos, float scale, int B, int T, int C) {
  const char* op = "embedding_forward_quant";
  check(B >= 0 && T >= 0 && C > 0, op, " (cuda): B = ", B, ", T = ", T, ", C = ", C, ": expected B, T >= 0 and C > 0");
  const int rows = B * T;
  if (rows == 0) return;
  check(x != nullptr && tokens != nullptr, op, " (cuda): null device pointer");
  check_packed(op, format, wte, wte_scales, C);
  with_format(format, op, [&]<WeightFormat F>() {
    const size_t words = static_cast<size_t>(rows) * ((static_cast<size_t>(C) + Packed<F>::kV - 1) / Packed<F>::kV);
    embedding_forward_quant_kernel<F><<<grid_for(words, kQuantThreads), kQuantThreads, 0, stream()>>>(
        x, tokens, wte, wte_scales, pos, scale, rows, T, C);
  });
  check_launch(op);
}

}  // namespace qkv::kernels::cuda
