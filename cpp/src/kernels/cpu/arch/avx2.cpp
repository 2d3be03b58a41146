// Instantiates the SIMD kernel bodies for xsimd::fma3<xsimd::avx2>; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them.
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::fma3<xsimd::avx2>>(bool);
template GemmRowKernels gemm_row_kernels<xsimd::fma3<xsimd::avx2>>();
template void attention_softmax_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, float*, float*, float*);
template void attention_probs_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, const float*);
template void attention_dscores_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, float*, const float*);
template void attention_delta_rows<xsimd::fma3<xsimd::avx2>>(float*, const float*, const float*, int, int, int);
}  // namespace qkv::kernels

// The row-wise kernels (layernorm, bias + activation, cross-entropy, adam): their table for this set.
#include "kernels/cpu/rowwise_simd.h"
namespace qkv::kernels {
template const RowwiseKernels& rowwise_kernels_for<xsimd::fma3<xsimd::avx2>>();
}  // namespace qkv::kernels

// The product with quantized weights (gemm_quant): its row kernels and dequantization for this set.
#include "kernels/cpu/gemm_quant_simd.h"
namespace qkv::kernels {
template QuantKernels quant_kernels<xsimd::fma3<xsimd::avx2>>();
}  // namespace qkv::kernels
