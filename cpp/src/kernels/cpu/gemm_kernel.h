#pragma once
// What gemm.cpp and the per-instruction-set files share: the register-blocked micro-kernel of the packed
// matrix product (BLIS / GotoBLAS scheme), declared here and instantiated in kernels/cpu/arch/<isa>.cpp.
#include <cstddef>
#include <xsimd/config/xsimd_arch.hpp>

namespace qkv::kernels {

// C (mr, nr) = alpha * sum_k a[k] (mr) outer b[k] (nr) + beta * C, for k in [0, kc).
//   a: element (r, k) of the mr x kc block of op(A) at a[r * rs_a + k * cs_a]: a packed panel has rs_a = 1,
//      cs_a = mr (column k of the mr rows contiguous); a row-major A read in place has rs_a = lda, cs_a = 1.
//   b: kc rows of nr contiguous values, row k at b + k * ldb (a packed panel has ldb = nr; a row-major
//      op(B) that needs no packing is read in place with its own leading dimension).
//   beta == 0 writes C without reading it (C may hold garbage, even NaN), as BLAS does.
using GemmMicroFn = void (*)(int kc, const float* a, int rs_a, int cs_a, const float* b, int ldb, float* c, int ldc,
                             float alpha, float beta);

// count consecutive column panels of C (nr apart) against count B panels (b_step floats apart), one register
// tile each, as count calls of GemmMicroFn would compute them: one call per row panel's sweep.
using GemmPanelsFn = void (*)(int count, ptrdiff_t b_step, int kc, const float* a, int rs_a, int cs_a, const float* b,
                              int ldb, float* c, int ldc, float alpha, float beta);

// Packing's copy: row k of dst (width floats, at dst + k * width) = the first cols floats of row k of src
// (at src + k * ld), zero-padded past cols; for k in [0, rows). cols <= width.
using GemmPackRowsFn = void (*)(float* dst, int width, const float* src, int ld, int rows, int cols);

// Packing's transposing copy (transpose.h's contract): dst[k * R + r] = src[r * ld + k] for k < K, r < rows, zero for
// rows <= r < R.
using GemmPackTransposedFn = void (*)(float* dst, int R, const float* src, int ld, int rows, int K);

struct GemmMicroKernel {
  int mr, nr;  // the register tile: mr rows by nr columns of C held in registers over the k loop
  GemmMicroFn fn;
  GemmPackRowsFn pack_rows;  // in the same instruction set: whole vectors where a row holds them
  // The same tile cut to r < mr rows (rows[r]; rows[0] unused): C's ragged last panel of rows, computed
  // without the zero rows a full tile would multiply and without the round trip through a scratch tile.
  GemmMicroFn rows[16];
  GemmPanelsFn panels;  // null: the caller loops over fn
  // In 4 x 4 blocks of 128-bit vectors, for panels of at least 64 rows (gemm.cpp: pack_b); null: transpose.h's copy.
  GemmPackTransposedFn pack_transposed;
};

// The instruction set's register tile, or (narrow) its tile for products whose columns would fill only part of
// the main tile's last panel; on most sets the two are the same (gemm_simd.h).
template <class Arch>
GemmMicroKernel gemm_micro_kernel(bool narrow);

// The row kernels, for products with too few rows of op(A) to fill a register tile (generation: one new
// token per step). Nothing is packed: one row of C from one contiguous row a (K) of op(A), over the
// columns [0, N) of op(B); a column range is a shifted B and c.
//   dot:  op(B) = B^T, B (N, K) row-major:  c[n] = alpha * dot(a, B[n]) + beta * c[n]
//   axpy: op(B) = B,   B (K, N) row-major:  c = alpha * sum_k a[k] B[k] + beta * c
// beta == 0 writes c without reading it.
using GemmRowFn = void (*)(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c);
// The thin kernel, for products whose op(B) has a few columns (a LoRA adapter's t = x A^T at rank r): C (rows, N) =
// alpha * A Bt^T + beta * C, A (rows, K) row-major read in place (lda), Bt (N, K) row-major (ldbt), a block of rows and
// columns at a time with the shared loads of each; each element's sum is the same whatever rows and N are.
using GemmThinFn = void (*)(int rows, int N, int K, float alpha, const float* A, int lda, const float* Bt, int ldbt,
                            float beta, float* C, int ldc);
struct GemmRowKernels {
  GemmRowFn dot, axpy;
  GemmThinFn thin;
};
template <class Arch>
GemmRowKernels gemm_row_kernels();

extern template GemmMicroKernel gemm_micro_kernel<xsimd::avx512f>(bool);
extern template GemmMicroKernel gemm_micro_kernel<xsimd::fma3<xsimd::avx2>>(bool);
extern template GemmMicroKernel gemm_micro_kernel<xsimd::sse4_1>(bool);
extern template GemmMicroKernel gemm_micro_kernel<xsimd::neon64>(bool);
extern template GemmRowKernels gemm_row_kernels<xsimd::avx512f>();
extern template GemmRowKernels gemm_row_kernels<xsimd::fma3<xsimd::avx2>>();
extern template GemmRowKernels gemm_row_kernels<xsimd::sse4_1>();
extern template GemmRowKernels gemm_row_kernels<xsimd::neon64>();

}  // namespace qkv::kernels
