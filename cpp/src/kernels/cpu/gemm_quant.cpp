// The product with quantized weights, C (M,N) = A (M,K) W^T (kernels.h: gemm_quant), its naive oracle, and
// dequantize_rows.
//
// Two paths, by the rows of A:
//   M <= kRowPathMax (decoding: one token, or a few beams or batch rows): the row kernels of the active instruction
//     set (gemm_quant_kernel.h) dequantize W in registers and take its dot products with up to kQuantRowsMax rows
//     of A at once. Rows of W are split over the thread pool, a contiguous run a thread (parallel_for_runs: one
//     stream for the prefetchers), and each byte of W is read from memory once per
//     call: the product is bound by the bandwidth of reading W, which the packed formats cut 2x (f16, bf16), 4x
//     (int8) or ~7x (q4) against fp32.
//   more rows (a prompt's prefill, a LoRA step on a quantized base): W is dequantized a panel of rows at a time
//     into a buffer in natural order and multiplied by the fp32 gemm (its packed, register-tiled micro-kernel)
//     against A as it is: each panel is used by all M rows, and A is neither copied nor reordered.
// Both compute in fp32; they differ from the reference in rounding order only (the row kernels scale int8 rows' and
// q4 blocks' partial sums rather than each element).
// With int8_act, int8 and q4 weights on the row path quantize A's rows to int8 and take integer dot products
// instead (gemm_quant_dot.h: a different numerical contract, asked for explicitly).
#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm_quant_dot.h"
#include "kernels/cpu/gemm_quant_kernel.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/rowwise.h"
#include "kernels/kernels.h"
#include "qkv/thread_pool.h"
#include "runtime/parallel_runs.h"

namespace qkv::kernels {
namespace {

// Up to this many rows of A take the row kernels (each W byte read once); past it the panels and the fp32 gemm.
constexpr int kRowPathMax = 8;
// Rows of W per task of the row path.
constexpr int kRowChunk = 16;
// Rows of W per panel of the gemm path: its fp32 copy near 1 MiB, in whole multiples of 64 columns of C so that
// every micro-kernel's NR (<= 64) divides it and no panel but the last has a ragged column panel, which the gemm
// computes through a full-width tile (80 rows at K = 3072 left 16 of 64 columns of one tile in every panel). For a
// prompt's few rows (M <= 64) the panel is rounded up past 2^18 floats instead, so that the gemm turns the product
// around (kernels/cpu/gemm.cpp: gemm_swapped) and packs the rows rather than the panel: GPT-2's q4 and int8 prefill
// (32 tokens) 34-36 -> 24-25 ms. Longer products keep the smaller panel: a q4 base's LoRA step (its 128-row head
// chunks included) peaked 2.4 MiB higher with the larger one, and no faster.
int panel_rows(int K, int M) {
  const int k1 = std::max(K, 1), up = M <= 64 ? 63 : 0;
  return std::clamp(((1 << 18) / k1 + up) / 64 * 64, 64, 1024);
}

void rows_scalar(const QuantRows& q, int n0, int n1) {
  const int spr = q.spr;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    const float* s = spr ? q.scales + static_cast<size_t>(n) * spr : nullptr;
    float acc[kQuantRowsMax] = {};
    for (int k = 0; k < q.K; ++k) {
      const float w = ops::dequantize_element(q.f, row, s, k);
      for (int m = 0; m < q.M; ++m) acc[m] += q.A[static_cast<size_t>(m) * q.lda + k] * w;
    }
    for (int m = 0; m < q.M; ++m) q.C[static_cast<size_t>(m) * q.ldc + n] = acc[m];
  }
}

void dequantize_scalar(WeightFormat f, const uint8_t* row, const float* s, int K, float* out) {
  for (int k = 0; k < K; ++k) out[k] = ops::dequantize_element(f, row, s, k);
}

// A (M,K) -> dst (M,K) in block order for V lanes and factor R: element R*i + t of each whole block of R*V at
// t*V + i; the elements past the last whole block copied as they are.
void to_block_order(float* dst, const float* A, int lda, int M, int K, int V, int R) {
  const int B = R * V, whole = K / B * B;
  for (int m = 0; m < M; ++m) {
    const float* a = A + static_cast<size_t>(m) * lda;
    float* d = dst + static_cast<size_t>(m) * K;
    for (int b = 0; b < whole; b += B)
      for (int t = 0; t < R; ++t)
        for (int i = 0; i < V; ++i) d[b + t * V + i] = a[b + R * i + t];
    std::copy(a + whole, a + K, d + whole);
  }
}

// The int8-activation kernel of the active instruction set: on AVX-512 machines the VNNI one where the CPU has VNNI,
// else AVX2's (every AVX-512 machine has AVX2).
QuantDotFn select_dot_kernel() {
  switch (active_isa()) {
#if QKV_ISA_AVX2
    case Isa::AVX512: {
#if QKV_ISA_AVX512VNNI
      static const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
      if (vnni) return &quant_dot_rows_avx512vnni;
#endif
      return &quant_dot_rows_avx2;
    }
    case Isa::AVX2: return &quant_dot_rows_avx2;
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return &quant_dot_rows_sse41;
#endif
    default: return &quant_dot_rows_scalar;
  }
}

// Whether the kernel reads Int8Rows' q8 and zsum for format f: for Q4 AVX2's, the VNNI one and the relaxed-SIMD
// WebAssembly build's; for int8 the VNNI one.
bool reads_bytes([[maybe_unused]] QuantDotFn kernel, WeightFormat f) {
#if QKV_ISA_AVX512VNNI
  if (kernel == &quant_dot_rows_avx512vnni) return true;
#endif
  if (f != WeightFormat::Q4) return false;
#if QKV_ISA_AVX2
  if (kernel == &quant_dot_rows_avx2) return true;
#endif
#if QKV_ISA_SSE41
  if (kernel == &quant_dot_rows_sse41) return true;  // zsum (rows_q4_fours); q8 too, which only relaxed SIMD reads
#endif
  return false;
}

// The epilogue over columns [n0, n1) of C's rows [m0, m1) (ldc apart): bias_act's row pass on that piece, once per
// range of chunks a thread claimed (per 16-column chunk, its calls cost natively about what it saved). Its elements
// are computed as on the whole row (one element's lanes never depend on its neighbours'), so the pieces give
// bias_act_forward's result wherever they are cut.
void apply_epilogue(const QuantEpilogue* e, float* C, int ldc, int m0, int m1, int n0, int n1) {
  if (!e) return;
  const auto body = rowwise_kernels().bias_act;
  for (int m = m0; m < m1; ++m) {
    const size_t at = static_cast<size_t>(m) * ldc + n0;
    body(BiasActArgs{e->a + at, C + at, e->b ? e->b + n0 : nullptr, e->act, n1 - n0}, 0, 1);
  }
}

// The row path with int8 activations: A quantized once on this thread, rows of W split over the pool as the fp32
// row path splits them.
void gemm_quant_dot(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W, const float* scales,
                    float* C, int ldc, const QuantEpilogue* epilogue) {
  const int nb = (K + kDotBlock - 1) / kDotBlock;
  const QuantDotFn kernel = select_dot_kernel();
  const bool bytes = reads_bytes(kernel, f);
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<int8_t> q8;
  thread_local std::vector<int32_t> zsum;
  q.resize(static_cast<size_t>(M) * nb * kDotBlock);
  d.resize(static_cast<size_t>(M) * nb);
  q8.resize(bytes ? q.size() : 0);
  zsum.resize(bytes ? d.size() : 0);
  bool quantized = false;
#if QKV_ISA_SSE41
  if (kernel == &quant_dot_rows_sse41 && f == WeightFormat::Q4) {
    q4_quantize_sse41(A, lda, M, K, q.data(), d.data(), q8.data(), zsum.data());
    quantized = true;
  }
#endif
  if (!quantized)
    quantize_activations(A, lda, M, K, f, q.data(), d.data(), bytes ? q8.data() : nullptr,
                         bytes ? zsum.data() : nullptr);
#if QKV_ISA_AVX512VNNI
  if (kernel == &quant_dot_rows_avx512vnni && f == WeightFormat::Q4) q4_group_order_avx512vnni(q8.data(), M, nb);
#endif
  // The workers read this thread's buffers (a thread_local named in the lambda would be each worker's own).
  const int16_t* qa = q.data();
  const float* da = d.data();
  const int8_t* q8a = bytes ? q8.data() : nullptr;
  const int32_t* zsa = bytes ? zsum.data() : nullptr;
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  const int chunks = (N + kRowChunk - 1) / kRowChunk;
  parallel_for_runs(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int n0 = static_cast<int>(c) * kRowChunk, n1 = std::min(N, n0 + kRowChunk);
      for (int m0 = 0; m0 < M; m0 += kQuantRowsMax) {
        const size_t at = static_cast<size_t>(m0) * nb;
        const Int8Rows a{
            std::min(kQuantRowsMax, M - m0), K, nb, qa + at * kDotBlock, da + at, q8a ? q8a + at * kDotBlock : nullptr,
            zsa ? zsa + at : nullptr};
        kernel({f, a, W, stride, scales, spr, C + static_cast<size_t>(m0) * ldc, ldc}, n0, n1);
      }
    }
    apply_epilogue(epilogue, C, ldc, 0, M, static_cast<int>(c0) * kRowChunk,
                   std::min(N, static_cast<int>(c1) * kRowChunk));
  });
}

}  // namespace

QuantKernels select_quant_kernels() {
  switch (active_isa()) {
#if QKV_ISA_AVX512
    case Isa::AVX512: return quant_kernels<xsimd::avx512f>();
#endif
#if QKV_ISA_AVX2
    case Isa::AVX2: return quant_kernels<xsimd::fma3<xsimd::avx2>>();
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return quant_kernels<xsimd::sse4_1>();
#endif
#if QKV_ISA_NEON
    case Isa::NEON: return quant_kernels<xsimd::neon64>();
#endif
    default: return {1, {1, 1, 1, 1, 1}, &rows_scalar, &dequantize_scalar};
  }
}

// The vector kernels' dequantization, in natural order and exact (dequantize_element's float for every code).
void dequantize_rows(float* out, int ld_out, WeightFormat f, const uint8_t* W, const float* scales, int rows, int K) {
  const QuantKernels qk = select_quant_kernels();
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      qk.dequantize(f, W + static_cast<size_t>(r) * stride, spr ? scales + static_cast<size_t>(r) * spr : nullptr, K,
                    out + static_cast<size_t>(r) * ld_out);
  });
}

void gemm_quant(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W, const float* scales,
                float* C, int ldc, bool int8_act, const QuantEpilogue* epilogue) {
  if (M == 0 || N == 0) return;
  if (int8_act && (f == WeightFormat::Int8 || f == WeightFormat::Q4) && M <= kRowPathMax && K > 0)
    return gemm_quant_dot(M, N, K, A, lda, f, W, scales, C, ldc, epilogue);
  const QuantKernels qk = select_quant_kernels();
  const size_t stride = ops::row_stride(f, K);
  const int spr = ops::scales_per_row(f, K);
  const int k1 = std::max(K, 1);

  if (M <= kRowPathMax) {
    // A in the row kernels' block order, on this thread (the workers read it).
    thread_local std::vector<float> a_blocked;
    a_blocked.resize(static_cast<size_t>(M) * k1);
    float* const Ab = a_blocked.data();
    to_block_order(Ab, A, lda, M, K, qk.lanes, qk.order[static_cast<int>(f)]);
    const int chunks = (N + kRowChunk - 1) / kRowChunk;
    parallel_for_runs(chunks, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int n0 = static_cast<int>(c) * kRowChunk, n1 = std::min(N, n0 + kRowChunk);
        for (int m0 = 0; m0 < M; m0 += kQuantRowsMax) {
          const QuantRows q{
              f,   std::min(kQuantRowsMax, M - m0),   K,  Ab + static_cast<size_t>(m0) * K, K, W, stride, scales,
              spr, C + static_cast<size_t>(m0) * ldc, ldc};
          qk.rows(q, n0, n1);
        }
      }
      apply_epilogue(epilogue, C, ldc, 0, M, static_cast<int>(c0) * kRowChunk,
                     std::min(N, static_cast<int>(c1) * kRowChunk));
    });
    return;
  }

  // The panels in natural order (the vector kernels interleave each block in registers) so that A is multiplied as
  // it is: in block order it would be copied (12 MiB for a LoRA step's down-projection at 1024 x 3072), or, copied a
  // block of rows at a time, each panel dequantized once per block.
  const int nb_max = panel_rows(K, M);
  thread_local std::vector<float> panel;
  panel.resize(static_cast<size_t>(std::min(N, nb_max)) * k1);
  for (int n0 = 0; n0 < N; n0 += nb_max) {
    const int nb = std::min(nb_max, N - n0);
    float* p = panel.data();
    parallel_for(nb, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const size_t n = static_cast<size_t>(n0 + r);
        qk.dequantize(f, W + n * stride, spr ? scales + n * spr : nullptr, K, p + static_cast<size_t>(r) * K);
      }
    });
    gemm(false, true, M, nb, K, 1.f, A, lda, p, k1, 0.f, C + n0, ldc);
  }
  if (epilogue)  // a prompt's rows: after the products, over the pool by rows
    parallel_for(M, [&](int64_t r0, int64_t r1) {
      apply_epilogue(epilogue, C, ldc, static_cast<int>(r0), static_cast<int>(r1), 0, N);
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
