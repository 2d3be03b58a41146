#pragma once
// The SIMD micro-kernel of the matrix product, written once over xsimd::batch<float, Arch> and instantiated
// per instruction set in kernels/cpu/arch/<isa>.cpp (each compiled with that set's flags). Only those files
// include this header; gemm.cpp sees the declarations in gemm_kernel.h.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/gemm_kernel.h"

namespace qkv::kernels {

// The register tile is MR rows by NV vectors of C: MR*NV accumulators, NV vectors of b and one broadcast of a
// live at once. Each k step does NV loads of b, MR broadcasts of a and MR*NV FMAs, so the FMA units, not the
// loads, bound it, provided MR*NV covers FMA latency x throughput (4 cycles x 2 ports = 8 in flight).
// AVX-512 (32 registers) takes 6 x 4 vectors (6 x 64 floats: 24 accumulators). Against 8 x 2 vectors (16
// accumulators), measured on the char GPT's fifteen products (1 thread, CPU time, the kernels alternated in
// one process, best of 25): the step's products 37.2 -> 33.8 ms, 1024^3 +10-14%; 7 x 4 and 5 x 4 were no
// better and 4 x 4 no faster than 8 x 2. Per k step it loads 4 vectors of b for 24 FMAs instead of 2 for 16,
// and each C tile is stored once per 64 columns. 6 divides the batch x context row counts (768 = 12 x 64).
// A narrow product pads its last panel to 64 columns, though: AVX-512 keeps 8 x 2 vectors as its narrow
// tile, which gemm() picks where it pads less (attention's tiles of 32 keys or hs = 32 columns; the char LM
// head's N = 65, 57 -> 66 GFLOP/s).
// NEON (32 registers of 4 floats) takes 8 x 2 vectors.
// AVX2 and SSE (16 registers) take 6 x 2 vectors (12 accumulators).
// WebAssembly (SIMD128, no FMA) takes MR = 4: V8 maps it onto x86's 16 xmm registers but keeps one as its
// scratch, and without FMA each product needs a temporary, so MR = 6 (12 accumulators + 2 vectors of b + a +
// the product = 16 live) spills. Measured in Node 20, the char GPT step's CPU time, the three builds
// alternated in one process (min of 24 steps each, three orders): MR 6 203-208 ms, MR 5 185-188, MR 4 186-190.
// 4 rather than 5 divides the batch x context row counts. The relaxed-SIMD build (gemm_madd below: no
// temporary for the product) was no faster at MR = 6 than at 4 either.
struct GemmTile {
  int mr, nv;  // rows, and vectors of columns
};
template <class Arch>
constexpr GemmTile gemm_tile(bool narrow) {
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>) return narrow ? GemmTile{8, 2} : GemmTile{6, 4};
  if constexpr (std::is_same_v<Arch, xsimd::neon64>) return {8, 2};
#ifdef __EMSCRIPTEN__
  return {4, 2};
#else
  return {6, 2};
#endif
}

// a * b + c in the products' inner loops. xsimd::fma is one FMA instruction natively and, for sse4_1 in the
// plain WebAssembly build (SIMD128 has no FMA), a multiply and an add. The relaxed-SIMD WebAssembly build
// (QKV_WASM_RELAXED_SIMD, cpp/CMakeLists.txt) uses f32x4.relaxed_madd instead: fused where the CPU has FMA, as
// natively, and a multiply and an add where it has not. Clang 14 knows it only by its prototype's name and
// opcode; scripts/wasm-relaxed.mjs rewrites the opcode after linking. Its operands are a, b, c in that order:
// the standard instruction computes first * second + third.
template <class Arch>
inline xsimd::batch<float, Arch> gemm_madd(xsimd::batch<float, Arch> a, xsimd::batch<float, Arch> b,
                                           xsimd::batch<float, Arch> c) {
#ifdef QKV_WASM_RELAXED_SIMD
  if constexpr (std::is_same_v<Arch, xsimd::sse4_1>)
    return __builtin_wasm_fma_f32x4(static_cast<__m128>(a), static_cast<__m128>(b), static_cast<__m128>(c));
  else
#endif
    return xsimd::fma(a, b, c);
}

template <class Arch, int MR, int NV>
[[gnu::always_inline]] inline void gemm_micro(int kc, const float* a, int rs_a, int cs_a, const float* b, int ldb,
                                              float* c, int ldc, float alpha, float beta) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V(0.f);
  for (int k = 0; k < kc; ++k) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(b + v * W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V ar(a[static_cast<ptrdiff_t>(r) * rs_a]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = gemm_madd(ar, bv[v], acc[r][v]);
    }
    a += cs_a;
    b += ldb;
  }
  const V va(alpha);
  if (beta == 0.f) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      float* cr = c + static_cast<size_t>(r) * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) (va * acc[r][v]).store_unaligned(cr + v * W);
    }
  } else {
    // beta == 1 is the common case (the later K blocks, gradient accumulation): one FMA per vector, and
    // bit-identical to alpha * acc + 1 * c.
    const V vb(beta);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      float* cr = c + static_cast<size_t>(r) * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const V cv = beta == 1.f ? V::load_unaligned(cr + v * W) : vb * V::load_unaligned(cr + v * W);
        gemm_madd(va, acc[r][v], cv).store_unaligned(cr + v * W);
      }
    }
  }
}

template <class Arch, int MR, int NV>
void gemm_micro_panels(int count, ptrdiff_t b_step, int kc, const float* a, int rs_a, int cs_a, const float* b, int ldb,
                       float* c, int ldc, float alpha, float beta) {
  constexpr int NR = NV * static_cast<int>(xsimd::batch<float, Arch>::size);
  for (int q = 0; q < count; ++q, b += b_step, c += NR)
    gemm_micro<Arch, MR, NV>(kc, a, rs_a, cs_a, b, ldb, c, ldc, alpha, beta);
}

// Packing a row-major op(B) (rows of NR = 2 vectors) or a transposed A (rows of MR) is a strided copy of
// short rows; whole vectors move a B panel's row in two loads and two stores.
template <class Arch>
void gemm_pack_rows(float* dst, int width, const float* src, int ld, int rows, int cols) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  for (int k = 0; k < rows; ++k, dst += width, src += static_cast<ptrdiff_t>(ld)) {
    int j = 0;
    for (; j + W <= cols; j += W) V::load_unaligned(src + j).store_unaligned(dst + j);
    for (; j < cols; ++j) dst[j] = src[j];
    for (; j < width; ++j) dst[j] = 0.f;
  }
}

// The transposing copy four rows and four k at a time: four 128-bit loads, a 4 x 4 transpose in registers (two rounds
// of interleaves, the second on pairs of floats) and four stores, where transpose.h's copy moves one float at a time
// through R row pointers. For a panel of 64 rows that copy reads a float from each of 64 rows per k step, rows a
// power-of-two-ish stride apart that fall in few L1 sets: GPT-2's (768, 3072) feed-forward weight packed as op(B) for
// y = x W^T took 13.9 ms on one thread, 4.2 ms this way (64-row panels at K = 128 and 512: 1.7x and 2.3x; K = 768 and
// 2304 the same). At 4-32 rows the one-float copy is as fast or faster (up to 22%), so gemm takes this for 64.
template <class Arch>
void gemm_pack_transposed(float* dst, int R, const float* src, int ld, int rows, int K) {
  using A4 = std::conditional_t<std::is_same_v<Arch, xsimd::neon64>, xsimd::neon64, xsimd::sse4_1>;
  using Q = xsimd::batch<float, A4>;
  using D = xsimd::batch<double, A4>;  // a pair of floats as one lane, for the second round
  const int r4 = rows / 4 * 4, k4 = K / 4 * 4;
  for (int k = 0; k < k4; k += 4) {
    float* d = dst + static_cast<size_t>(k) * R;
    int r = 0;
    for (; r < r4; r += 4) {
      const float* s = src + static_cast<size_t>(r) * ld + k;
      const Q a = Q::load_unaligned(s), b = Q::load_unaligned(s + ld), c = Q::load_unaligned(s + 2 * ld),
              e = Q::load_unaligned(s + 3 * ld);
      // (a0 b0 a1 b1), (a2 b2 a3 b3), (c0 e0 c1 e1), (c2 e2 c3 e3); then their pairs: (a0 b0 c0 e0), ...
      const D ab_lo = xsimd::bitwise_cast<D>(xsimd::zip_lo(a, b)), ab_hi = xsimd::bitwise_cast<D>(xsimd::zip_hi(a, b));
      const D ce_lo = xsimd::bitwise_cast<D>(xsimd::zip_lo(c, e)), ce_hi = xsimd::bitwise_cast<D>(xsimd::zip_hi(c, e));
      xsimd::bitwise_cast<Q>(xsimd::zip_lo(ab_lo, ce_lo)).store_unaligned(d + r);
      xsimd::bitwise_cast<Q>(xsimd::zip_hi(ab_lo, ce_lo)).store_unaligned(d + R + r);
      xsimd::bitwise_cast<Q>(xsimd::zip_lo(ab_hi, ce_hi)).store_unaligned(d + 2 * R + r);
      xsimd::bitwise_cast<Q>(xsimd::zip_hi(ab_hi, ce_hi)).store_unaligned(d + 3 * R + r);
    }
    for (; r < rows; ++r)
      for (int j = 0; j < 4; ++j) d[j * R + r] = src[static_cast<size_t>(r) * ld + k + j];
    for (; r < R; ++r)
      for (int j = 0; j < 4; ++j) d[j * R + r] = 0.f;
  }
  for (int k = k4; k < K; ++k) {
    float* d = dst + static_cast<size_t>(k) * R;
    for (int r = 0; r < rows; ++r) d[r] = src[static_cast<size_t>(r) * ld + k];
    for (int r = rows; r < R; ++r) d[r] = 0.f;
  }
}

template <class Arch, int MR, int NV, int... R>
GemmMicroKernel gemm_make_kernel(std::integer_sequence<int, R...>) {
  static_assert(MR <= 16, "GemmMicroKernel::rows holds tiles of up to 15 rows");
  return {MR,
          NV * static_cast<int>(xsimd::batch<float, Arch>::size),
          &gemm_micro<Arch, MR, NV>,
          &gemm_pack_rows<Arch>,
          {nullptr, &gemm_micro<Arch, R + 1, NV>...},
          &gemm_micro_panels<Arch, MR, NV>,
          &gemm_pack_transposed<Arch>};
}

template <class Arch, bool Narrow>
GemmMicroKernel gemm_micro_kernel_for() {
  constexpr GemmTile t = gemm_tile<Arch>(Narrow);
  return gemm_make_kernel<Arch, t.mr, t.nv>(std::make_integer_sequence<int, t.mr - 1>());
}

template <class Arch>
GemmMicroKernel gemm_micro_kernel(bool narrow) {
  return narrow ? gemm_micro_kernel_for<Arch, true>() : gemm_micro_kernel_for<Arch, false>();
}

inline float gemm_store(float alpha, float acc, float beta, float c) {
  return beta == 0.f ? alpha * acc : alpha * acc + beta * c;
}

// c[n] = alpha * dot(a, B[n]) + beta * c[n] (a row of C from a row of A against the rows of B: batch-1 decoding's
// every matrix-vector product). The product streams B once and should run at memory bandwidth, so B is read the way
// the hardware prefetchers follow best: one row at a time, front to back, rows in order, so that a thread's share of
// B (consecutive rows) is one sequential read. Blocks of 8 rows at once (a shared load of a per 8 of B) read 8
// streams, each advancing 32 bytes a step in WebAssembly: 15-16 GB/s a thread under Node 20 on the 2-core AMD EPYC
// against 30 with this, and GPT-2 124M's fp32 decode in the package 16.2-16.6 ms/token against 12.6-13.2 (natively
// 8.1 against 6.6-6.8, AVX-512). Four accumulators keep four multiply-adds in flight (SIMD128 under V8 has no FMA:
// a multiply, then an add on the chain): lane l of accumulator u sums a[k] B[n][k] for k = 4Wi + uW + l in order;
// then whole vectors past the last 4W into accumulator 0, the sum (s0 + s1) + (s2 + s3), its lanes, and the K % W
// tail. Every row is the same sum wherever it falls in N.
//
// With 4-lane vectors (SIMD128, SSE4.1) one stream is too few: 16-byte loads put a few hundred bytes of one row in the
// core's out-of-order window, so few of B's lines are in flight, and on the 2-core Intel Xeon (Emerald Rapids) a
// thread read 9.5 GB/s of B this way under Node 20, against 14.4 for a native AVX2 stream. gemm_row_dot_streams reads
// kRowDotStreams rows at once from parts of B far apart (row i of each of kRowDotStreams equal runs of the rows), each
// part still read front to back: 12.4-13.7 GB/s in the same standalone loop (bench/README.md "Several streams").
template <class Arch>
void gemm_row_dot_one(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  for (int n = 0; n < N; ++n) {
    const float* b = B + static_cast<size_t>(n) * ldb;
    V s0(0.f), s1(0.f), s2(0.f), s3(0.f);
    int k = 0;
    for (; k + 4 * W <= K; k += 4 * W) {
      s0 = gemm_madd(V::load_unaligned(a + k), V::load_unaligned(b + k), s0);
      s1 = gemm_madd(V::load_unaligned(a + k + W), V::load_unaligned(b + k + W), s1);
      s2 = gemm_madd(V::load_unaligned(a + k + 2 * W), V::load_unaligned(b + k + 2 * W), s2);
      s3 = gemm_madd(V::load_unaligned(a + k + 3 * W), V::load_unaligned(b + k + 3 * W), s3);
    }
    for (; k + W <= K; k += W) s0 = gemm_madd(V::load_unaligned(a + k), V::load_unaligned(b + k), s0);
    float d = xsimd::hadd((s0 + s1) + (s2 + s3));
    for (; k < K; ++k) d += a[k] * b[k];
    c[n] = gemm_store(alpha, d, beta, c[n]);
  }
}

inline constexpr int kRowDotStreams = 4;

// The 4-lane kernel: rows P apart (P = N / kRowDotStreams) at once, one accumulator each, a loaded once for all of
// them. A row's sum: lane l sums a[k] B[n][k] for k = Wi + l in order, then its lanes, then the K % W tail; the
// rows past kRowDotStreams * P, one at a time, the same sum, so that every row is the same sum wherever it falls.
template <class Arch>
void gemm_row_dot_streams(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size), S = kRowDotStreams;
  const int P = N / S;
  const auto rows = [&]<int Count>(int n) {  // rows n, n + P, ... (Count of them)
    const float* b[Count];
    V s[Count];
    for (int j = 0; j < Count; ++j) {
      b[j] = B + static_cast<size_t>(n + j * P) * ldb;
      s[j] = V(0.f);
    }
    int k = 0;
    for (; k + W <= K; k += W) {
      const V ak = V::load_unaligned(a + k);
      for (int j = 0; j < Count; ++j) s[j] = gemm_madd(ak, V::load_unaligned(b[j] + k), s[j]);
    }
    for (int j = 0; j < Count; ++j) {
      float d = xsimd::hadd(s[j]);
      for (int t = k; t < K; ++t) d += a[t] * b[j][t];
      float& cj = c[n + j * P];
      cj = gemm_store(alpha, d, beta, cj);
    }
  };
  for (int i = 0; i < P; ++i) rows.template operator()<S>(i);
  for (int n = S * P; n < N; ++n) rows.template operator()<1>(n);
}

template <class Arch>
void gemm_row_dot(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  if constexpr (xsimd::batch<float, Arch>::size == 4)
    gemm_row_dot_streams<Arch>(N, K, alpha, a, B, ldb, beta, c);
  else
    gemm_row_dot_one<Arch>(N, K, alpha, a, B, ldb, beta, c);
}

// One pass of gemm_row_axpy: NV vectors of columns of c from column n, each a chain of K multiply-adds (arrays indexed
// by compile-time loops stay in registers).
template <class Arch, int NV>
void gemm_row_axpy_pass(int n, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  V s[NV];
  for (int v = 0; v < NV; ++v) s[v] = V(0.f);
  const float* b = B + n;
  for (int k = 0; k < K; ++k, b += ldb) {
    const V ak(a[k]);
    for (int v = 0; v < NV; ++v) s[v] = gemm_madd(ak, V::load_unaligned(b + v * W), s[v]);
  }
  const V va(alpha), vb(beta);
  for (int v = 0; v < NV; ++v) {
    float* cv = c + n + v * W;
    (beta == 0.f ? va * s[v] : gemm_madd(va, s[v], vb * V::load_unaligned(cv))).store_unaligned(cv);
  }
}

// c = alpha * sum_k a[k] B[k] + beta * c, four vectors of columns at a time, then two, k in order (as the
// micro-kernel sums each element), then the scalar tail. Each pass is a chain of K multiply-adds per vector, so
// four chains where two were keep twice as many in flight: the attention's P v of a decoded token (N = 64 head
// columns, K = the cached keys) is this kernel, and GPT-2 124M's attention at one cached token over 96 keys took
// 16.8 -> 12.3 us with the 4-lane kernels (`--isa sse4.1`, one thread), 8.5 -> 7.9 with AVX-512's.
template <class Arch>
void gemm_row_axpy(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  constexpr int W = static_cast<int>(xsimd::batch<float, Arch>::size);
  int n = 0;
  for (; n + 4 * W <= N; n += 4 * W) gemm_row_axpy_pass<Arch, 4>(n, K, alpha, a, B, ldb, beta, c);
  for (; n + 2 * W <= N; n += 2 * W) gemm_row_axpy_pass<Arch, 2>(n, K, alpha, a, B, ldb, beta, c);
  for (; n < N; ++n) {
    float s = 0.f;
    for (int k = 0; k < K; ++k) s = std::fma(a[k], B[static_cast<size_t>(k) * ldb + n], s);
    c[n] = gemm_store(alpha, s, beta, c[n]);
  }
}

// The thin kernel's register tile: R rows by NC columns of C, one accumulator each, with R vectors of the rows of A
// and one of a row of Bt live: AVX-512 and NEON (32 registers) 3 x 8 (24 accumulators, 11 loads per 24 multiply-adds),
// the 16-register sets 2 x 4 (WebAssembly's V8 keeps one of its 16 for itself, and SIMD128's multiply-add needs a
// temporary).
template <class Arch>
constexpr int gemm_thin_rows() {
  return std::is_same_v<Arch, xsimd::avx512f> || std::is_same_v<Arch, xsimd::neon64> ? 3 : 2;
}
template <class Arch>
constexpr int gemm_thin_cols() {
  return gemm_thin_rows<Arch>() == 3 ? 8 : 4;
}

// R rows by the first nc <= NC columns of the thin product (gemm_row_thin): lane l of accumulator (r, j) sums
// a_r[k] bt_j[k] for k = Wi + l in order, then its lanes (xsimd::hadd) and the K % W tail in order. Columns past nc
// repeat column nc - 1 and are not stored, so every element is the same sum whatever R, nc and the row's place.
template <class Arch, int R>
void gemm_thin_tile(int nc, int K, float alpha, const float* a, int lda, const float* bt, int ldbt, float beta,
                    float* c, int ldc) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size), NC = gemm_thin_cols<Arch>();
  const float* b[NC];
  for (int j = 0; j < NC; ++j) b[j] = bt + static_cast<size_t>(std::min(j, nc - 1)) * ldbt;
  V acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NC; ++j) acc[r][j] = V(0.f);
  int k = 0;
  for (; k + W <= K; k += W) {
    V ar[R];
    for (int r = 0; r < R; ++r) ar[r] = V::load_unaligned(a + static_cast<size_t>(r) * lda + k);
    for (int j = 0; j < NC; ++j) {
      const V bj = V::load_unaligned(b[j] + k);
      for (int r = 0; r < R; ++r) acc[r][j] = gemm_madd(ar[r], bj, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float* ar = a + static_cast<size_t>(r) * lda;
    float* cr = c + static_cast<size_t>(r) * ldc;
    for (int j = 0; j < nc; ++j) {
      float d = xsimd::hadd(acc[r][j]);
      for (int t = k; t < K; ++t) d = std::fma(ar[t], b[j][t], d);
      cr[j] = gemm_store(alpha, d, beta, cr[j]);
    }
  }
}

// C (rows, N) = alpha * A Bt^T + beta * C for a thin op(B) (gemm_kernel.h): R rows by NC columns of C at a time.
template <class Arch>
void gemm_row_thin(int rows, int N, int K, float alpha, const float* A, int lda, const float* Bt, int ldbt, float beta,
                   float* C, int ldc) {
  constexpr int R = gemm_thin_rows<Arch>(), NC = gemm_thin_cols<Arch>();
  for (int i = 0; i < rows; i += R) {
    const float* a = A + static_cast<size_t>(i) * lda;
    for (int j = 0; j < N; j += NC) {
      const int nc = std::min(NC, N - j);
      const float* bt = Bt + static_cast<size_t>(j) * ldbt;
      float* c = C + static_cast<size_t>(i) * ldc + j;
      switch (std::min(R, rows - i)) {
        case 1: gemm_thin_tile<Arch, 1>(nc, K, alpha, a, lda, bt, ldbt, beta, c, ldc); break;
        case 2: gemm_thin_tile<Arch, 2>(nc, K, alpha, a, lda, bt, ldbt, beta, c, ldc); break;
        default: gemm_thin_tile<Arch, R>(nc, K, alpha, a, lda, bt, ldbt, beta, c, ldc); break;
      }
    }
  }
}

template <class Arch>
GemmRowKernels gemm_row_kernels() {
  return {&gemm_row_dot<Arch>, &gemm_row_axpy<Arch>, &gemm_row_thin<Arch>};
}

}  // namespace qkv::kernels
