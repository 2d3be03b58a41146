#pragma once
// What gemm.cpp and the per-instruction-set files share: the register-blocked micro-kernel of the packed
// matrix product (BLIS / GotoBLAS scheme), declared here and instantiated in kernels/cpu/arch/<isa>.cpp.
#include <xsimd/config/xsimd_arch.hpp>

namespace qkv::kernels {

// C (mr, nr) = alpha * sum_k a[k] (mr) outer b[k] (nr) + beta * C, for k in [0, kc).
//   a: a packed panel, kc rows of mr contiguous values (column k of the mr rows of op(A)).
//   b: kc rows of nr contiguous values, row k at b + k * ldb (a packed panel has ldb = nr; a row-major
//      op(B) that needs no packing is read in place with its own leading dimension).
//   beta == 0 writes C without reading it (C may hold garbage, even NaN), as BLAS does.
using GemmMicroFn = void (*)(int kc, const float* a, const float* b, int ldb, float* c, int ldc, float alpha,
                             float beta);

struct GemmMicroKernel {
  int mr, nr;  // the register tile: mr rows by nr columns of C held in registers over the k loop
  GemmMicroFn fn;
};

template <class Arch>
GemmMicroKernel gemm_micro_kernel();

extern template GemmMicroKernel gemm_micro_kernel<xsimd::avx512f>();
extern template GemmMicroKernel gemm_micro_kernel<xsimd::fma3<xsimd::avx2>>();
extern template GemmMicroKernel gemm_micro_kernel<xsimd::sse4_1>();
extern template GemmMicroKernel gemm_micro_kernel<xsimd::neon64>();

}  // namespace qkv::kernels
