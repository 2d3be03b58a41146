#pragma once
// What gemm.cpp and the per-instruction-set files share: the arguments of one product and the row-range
// kernel, declared here and instantiated in kernels/cpu/arch/<isa>.cpp.
#include <xsimd/config/xsimd_arch.hpp>

namespace qkv::kernels {

struct GemmArgs {
  bool trans_a, trans_b;
  int M, N, K;
  float alpha;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float beta;
  float* C;
  int ldc;
};

// Computes rows [i0, i1) of C. Requires !(trans_a && trans_b).
template <class Arch>
void gemm_rows(const GemmArgs& g, int i0, int i1);

extern template void gemm_rows<xsimd::avx512f>(const GemmArgs&, int, int);
extern template void gemm_rows<xsimd::fma3<xsimd::avx2>>(const GemmArgs&, int, int);
extern template void gemm_rows<xsimd::sse4_1>(const GemmArgs&, int, int);
extern template void gemm_rows<xsimd::neon64>(const GemmArgs&, int, int);

}  // namespace qkv::kernels
