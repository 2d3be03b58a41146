// The quantized-weight kernels (ops/weight_format.h's packed rows): gemm_quant's decoding and prefill products,
// dequantize_rows and the embedding from a packed table. Device code only, so that tests/cpp/emulation runs them
// on the CPU as well; gemm_quant.cu launches them.
//
// A packed row of K elements is read as 32-bit words; word j holds elements k = j * V + i, i < V (Packed<F>::kV):
//   F16, BF16: V 2, half i of the word (little-endian: element 2j in the low half)        no scale
//   Int8:      V 4, signed byte i, times scale[n]                                          1 scale per row
//   Q4:        V 8, nibble i (the low nibble of byte b is element 2b) minus 8, times        G = ceil(K/32) bf16
//              group j / 4's bfloat16 scale (a group of 32 elements is 16 bytes, 4 words)    per row, 2 a word
// Every element is dequantized as dequantize_element does it, (float)q * scale with one rounding, except where a
// kernel factors the scale out of a dot product (the decoding kernel: s * sum_i q_i a_i, the same math up to
// rounding). Elements past K (a row's padding) are never used, and A is never read past K.
//
// Layout: A (M, K) row-major with lda; C (M, N) with ldc; W (N rows, row_stride(F, K) bytes each), 4-byte aligned;
// scales (N, scales_per_row). Embedding: x (B*T, C), tokens (B*T), wte (V rows of C), pos (T_max, C) or null.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "ops/weight_format.h"

namespace qkv::kernels::cuda {
namespace {

using ops::WeightFormat;

// An IEEE half's bits as a float, exactly: the hardware's conversion on a GPU, weight_format.h's on the emulator.
__device__ inline float half_bits_to_float(uint32_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
  return f;
#else
  return ops::f16_to_f32(static_cast<uint16_t>(h));
#endif
}

template <WeightFormat F>
struct Packed {
  static_assert(F == WeightFormat::F16 || F == WeightFormat::BF16 || F == WeightFormat::Int8 || F == WeightFormat::Q4,
                "a packed format");
  static constexpr int kV = F == WeightFormat::Q4 ? 8 : F == WeightFormat::Int8 ? 4 : 2;  // elements per word

  // Words from one row's start to the next's.
  __device__ static size_t row_words(int K) { return ops::row_stride(F, K) / 4; }
  // Element i of word w, before its scale.
  __device__ static float q(uint32_t w, int i) {
    if constexpr (F == WeightFormat::F16) {
      return half_bits_to_float(i ? w >> 16 : w & 0xffffu);
    } else if constexpr (F == WeightFormat::BF16) {
      return __uint_as_float(i ? w & 0xffff0000u : w << 16);
    } else if constexpr (F == WeightFormat::Int8) {
      return static_cast<float>(static_cast<int8_t>((w >> (8 * i)) & 0xffu));
    } else {
      return static_cast<float>(static_cast<int>((w >> (4 * i)) & 0xfu) - 8);
    }
  }
  // The scale of word j of row `row` (1 for the half formats: scales may be null).
  __device__ static float scale([[maybe_unused]] const float* scales, [[maybe_unused]] size_t row,
                                [[maybe_unused]] size_t j, [[maybe_unused]] int K) {
    if constexpr (F == WeightFormat::Int8) {
      return scales[row];
    } else if constexpr (F == WeightFormat::Q4) {
      return ops::q4_scale(scales + row * static_cast<size_t>(ops::scales_per_row(F, K)), static_cast<int>(j / 4));
    } else {
      return 1.f;
    }
  }
};

// ---- gemm_quant, decoding (M <= kGemvMaxM): a warp per row of W, kGemvWarps rows per block ----
// Each lane reads its 16-byte pieces of the packed row (uint4 loads: 32 lanes, 512 consecutive bytes per step; the
// words before the row's first 16-byte boundary and after its last are read one by one), dequantizes them in
// registers against kGemvRowsOfA rows of A at a time (A is read through the cache: every warp reads the same rows),
// and the lanes' partial sums meet in a butterfly of shuffles. W is read once per kGemvRowsOfA rows of A.
constexpr int kGemvMaxM = 8;
constexpr int kGemvWarps = 8;
constexpr int kGemvRowsOfA = 4;

// A word's V elements of a row of A: float4 (or, for V = 2, float2) loads where A's rows are 16-byte aligned
// (kVecA: A and lda * 4 bytes multiples of 16, and a word's first element k0 = j V a multiple of V), else one by one.
template <int V, bool kVecA>
__device__ inline void load_a(float (&x)[V], const float* __restrict__ a) {
  if constexpr (kVecA && V >= 4) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(a + i);
      x[i] = v.x, x[i + 1] = v.y, x[i + 2] = v.z, x[i + 3] = v.w;
    }
  } else if constexpr (kVecA) {
    const float2 v = *reinterpret_cast<const float2*>(a);
    x[0] = v.x, x[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) x[i] = a[i];
  }
}

// acc[mm] += s * sum_i q_i a[mm][j V + i] for the mb rows of A of the pass, word w being word j of the row.
template <WeightFormat F, bool kVecA>
__device__ inline void gemv_word(float (&acc)[kGemvRowsOfA], uint32_t w, size_t j, int K, int mb,
                                 const float* __restrict__ a, int lda, const float* __restrict__ scales, size_t row) {
  constexpr int V = Packed<F>::kV;
  const size_t k0 = j * V;
  const float s = Packed<F>::scale(scales, row, j, K);
  float q[V];
#pragma unroll
  for (int i = 0; i < V; ++i) q[i] = Packed<F>::q(w, i);
  if (k0 + V <= static_cast<size_t>(K)) {
#pragma unroll
    for (int mm = 0; mm < kGemvRowsOfA; ++mm) {
      if (mm >= mb) break;
      float x[V];
      load_a<V, kVecA>(x, a + static_cast<size_t>(mm) * lda + k0);
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < V; ++i) d = fmaf(q[i], x[i], d);
      acc[mm] = fmaf(s, d, acc[mm]);
    }
  } else {  // the row's last word: only its elements below K (A is not read past K)
    const int valid = static_cast<int>(static_cast<size_t>(K) - k0);
#pragma unroll
    for (int mm = 0; mm < kGemvRowsOfA; ++mm) {
      if (mm >= mb) break;
      const float* am = a + static_cast<size_t>(mm) * lda + k0;
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) d = fmaf(q[i], am[i], d);
      acc[mm] = fmaf(s, d, acc[mm]);
    }
  }
}

template <WeightFormat F, bool kVecA>
__global__ void __launch_bounds__(kGemvWarps* kWarp)
    gemv_quant_kernel(int M, int N, int K, const float* __restrict__ A, int lda, const uint8_t* __restrict__ W,
                      const float* __restrict__ scales, float* __restrict__ C, int ldc) {
  constexpr int V = Packed<F>::kV;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const size_t row = static_cast<size_t>(blockIdx.x) * kGemvWarps + threadIdx.x / kWarp;
  if (row >= static_cast<size_t>(N)) return;  // the whole warp: the shuffles below are the warp's alone
  const uint32_t* w = reinterpret_cast<const uint32_t*>(W + row * Packed<F>::row_words(K) * 4);
  const size_t words = (static_cast<size_t>(K) + V - 1) / V;  // the words holding elements below K
  // head words up to the first 16-byte boundary, then body uint4s, then the rest one by one
  const size_t misalign = (reinterpret_cast<uintptr_t>(w) / 4) % 4;
  const size_t head = misalign ? (4 - misalign < words ? 4 - misalign : words) : 0;
  const size_t body = (words - head) / 4;
  const uint4* w4 = reinterpret_cast<const uint4*>(w + head);
  for (int m0 = 0; m0 < M; m0 += kGemvRowsOfA) {
    const int mb = M - m0 < kGemvRowsOfA ? M - m0 : kGemvRowsOfA;
    const float* a = A + static_cast<size_t>(m0) * lda;
    float acc[kGemvRowsOfA] = {};
    for (size_t u = lane; u < body; u += kWarp) {
      const uint4 q = w4[u];
      const size_t j = head + 4 * u;
      gemv_word<F, kVecA>(acc, q.x, j, K, mb, a, lda, scales, row);
      gemv_word<F, kVecA>(acc, q.y, j + 1, K, mb, a, lda, scales, row);
      gemv_word<F, kVecA>(acc, q.z, j + 2, K, mb, a, lda, scales, row);
      gemv_word<F, kVecA>(acc, q.w, j + 3, K, mb, a, lda, scales, row);
    }
    for (size_t j = lane; j < head; j += kWarp) gemv_word<F, kVecA>(acc, w[j], j, K, mb, a, lda, scales, row);
    for (size_t j = head + 4 * body + lane; j < words; j += kWarp)
      gemv_word<F, kVecA>(acc, w[j], j, K, mb, a, lda, scales, row);
#pragma unroll
    for (int mm = 0; mm < kGemvRowsOfA; ++mm) {
      const float total = warp_sum(acc[mm]);
      if (lane == 0 && mm < mb) C[static_cast<size_t>(m0 + mm) * ldc + row] = total;
    }
  }
}

// ---- gemm_quant, prefill (M > kGemvMaxM): 64 x 64 tiles of C per block of 256 threads, each thread a 4 x 4 piece ----
// K in steps of 32 (one Q4 group) through shared memory: A's tile as (k, m), W's dequantized on its way in as (k, n)
// (each thread unpacks whole words), then 32 rank-1 updates of the register tile. fp32 FMA on the CUDA cores: the
// products are the reference's (the dequantized floats), summed in fp32 as gemm's fp32 path sums them.
constexpr int kTile = 64;
constexpr int kTileK = 32;
constexpr int kTileThreads = 256;

template <WeightFormat F>
__global__ void __launch_bounds__(kTileThreads)
    gemm_quant_tiled_kernel(int M, int N, int K, const float* __restrict__ A, int lda, const uint8_t* __restrict__ W,
                            const float* __restrict__ scales, float* __restrict__ C, int ldc) {
  constexpr int V = Packed<F>::kV, kWordsPerStep = kTileK / V;
  __shared__ float As[kTileK][kTile + 4];  // + 4: the (k, m) stores of a warp fall in different banks
  __shared__ float Ws[kTileK][kTile + 4];
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int m0 = static_cast<int>(blockIdx.y) * kTile, n0 = static_cast<int>(blockIdx.x) * kTile;
  const size_t stride = Packed<F>::row_words(K);
  const uint32_t* W32 = reinterpret_cast<const uint32_t*>(W);
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kTileK) {
    for (int e = tid; e < kTile * kTileK; e += kTileThreads) {  // consecutive threads along a row of A
      const int mm = e / kTileK, kk = e % kTileK, m = m0 + mm, k = k0 + kk;
      As[kk][mm] = m < M && k < K ? A[static_cast<size_t>(m) * lda + k] : 0.f;
    }
    for (int e = tid; e < kTile * kWordsPerStep; e += kTileThreads) {  // a word each: V elements of a row of W
      const int nn = e / kWordsPerStep, n = n0 + nn;
      const size_t j = static_cast<size_t>(k0 / V + e % kWordsPerStep);
      const bool inside = n < N && j * V < static_cast<size_t>(K);
      const uint32_t w = inside ? W32[static_cast<size_t>(n) * stride + j] : 0u;
      const float s = inside ? Packed<F>::scale(scales, static_cast<size_t>(n), j, K) : 0.f;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int k = static_cast<int>(j) * V + i;
        Ws[k - k0][nn] = inside && k < K ? Packed<F>::q(w, i) * s : 0.f;
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = As[kk][ty * 4 + i];
        b[i] = Ws[kk][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(a[i], b[jj], acc[i][jj]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= M) break;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int n = n0 + tx * 4 + jj;
      if (n < N) C[static_cast<size_t>(m) * ldc + n] = acc[i][jj];
    }
  }
}

// ---- dequantize_rows, embedding_forward_quant: a thread per packed word ----
constexpr int kQuantThreads = 256;

// A grid-stride loop over the words of `rows` packed rows of K elements that hold elements below K: for row r's
// word j, f(r, j, w, s) with w the word and s its scale, read from the packed row table_row(r) of W (r itself, or
// the token of an embedding's row r).
template <WeightFormat F, class TableRow, class Fn>
__device__ inline void for_each_packed_word(const uint8_t* __restrict__ W, const float* __restrict__ scales, int rows,
                                            int K, TableRow table_row, Fn f) {
  constexpr int V = Packed<F>::kV;
  const size_t words = (static_cast<size_t>(K) + V - 1) / V, n = static_cast<size_t>(rows) * words;
  const size_t stride = Packed<F>::row_words(K);
  const uint32_t* W32 = reinterpret_cast<const uint32_t*>(W);
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < n;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = t / words, j = t % words, row = table_row(r);
    f(r, j, W32[row * stride + j], Packed<F>::scale(scales, row, j, K));
  }
}

template <WeightFormat F>
__global__ void dequantize_rows_kernel(float* __restrict__ out, int ld_out, const uint8_t* __restrict__ W,
                                       const float* __restrict__ scales, int rows, int K) {
  constexpr int V = Packed<F>::kV;
  for_each_packed_word<F>(
      W, scales, rows, K, [](size_t r) { return r; },
      [&](size_t r, size_t j, uint32_t w, float s) {
        float* o = out + r * static_cast<size_t>(ld_out) + j * V;
#pragma unroll
        for (int i = 0; i < V; ++i)
          if (j * V + i < static_cast<size_t>(K)) o[i] = __fmul_rn(Packed<F>::q(w, i), s);
      });
}

// x = scale * deq + pos with unfused multiplies and add (the CPU's operations: embedding_forward's arithmetic on the
// dequantized float), + 0 without positions (so that -0 becomes +0 as on the CPU).
template <WeightFormat F>
__global__ void embedding_forward_quant_kernel(float* __restrict__ x, const int32_t* __restrict__ tokens,
                                               const uint8_t* __restrict__ wte, const float* __restrict__ scales,
                                               const float* __restrict__ pos, float scale, int rows, int T, int C) {
  constexpr int V = Packed<F>::kV;
  for_each_packed_word<F>(
      wte, scales, rows, C, [&](size_t r) { return static_cast<size_t>(tokens[r]); },
      [&](size_t r, size_t j, uint32_t w, float s) {
        const float* p = pos ? pos + (r % static_cast<size_t>(T)) * C + j * V : nullptr;
        float* o = x + r * C + j * V;
#pragma unroll
        for (int i = 0; i < V; ++i)
          if (j * V + i < static_cast<size_t>(C))
            o[i] = __fadd_rn(__fmul_rn(scale, __fmul_rn(Packed<F>::q(w, i), s)), p ? p[i] : 0.f);
      });
}

}  // namespace
}  // namespace qkv::kernels::cuda
