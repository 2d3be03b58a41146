// The selection table of the row-wise kernels: the active instruction set's SIMD bodies, scalar last.
#include "kernels/cpu/rowwise.h"

#include "kernels/cpu/isa.h"

namespace qkv::kernels {
namespace {

const RowwiseKernels kScalar{&layernorm_rows_reference,    &layernorm_backward_rows_reference,
                             &bias_act_rows_reference,     &bias_act_backward_rows_reference,
                             &crossentropy_rows_reference, &adam_reference,
                             &sum_squares_reference};

}  // namespace

const RowwiseKernels& rowwise_kernels() {
  switch (active_isa()) {
#if QKV_ISA_AVX512
    case Isa::AVX512: return rowwise_kernels_for<xsimd::avx512f>();
#endif
#if QKV_ISA_AVX2
    case Isa::AVX2: return rowwise_kernels_for<xsimd::fma3<xsimd::avx2>>();
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return rowwise_kernels_for<xsimd::sse4_1>();
#endif
#if QKV_ISA_NEON
    case Isa::NEON: return rowwise_kernels_for<xsimd::neon64>();
#endif
    default: return kScalar;
  }
}

}  // namespace qkv::kernels
