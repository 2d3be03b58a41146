// Instantiates the SIMD kernel bodies for xsimd::sse4_1; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them. In the WebAssembly build these are the
// kernels that run, through Emscripten's SSE emulation: wasm_sse.h first replaces its slow conversions.
#include "kernels/cpu/wasm_sse.h"
// (wasm_sse.h must come before any xsimd header)
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::sse4_1>(bool);
template GemmRowKernels gemm_row_kernels<xsimd::sse4_1>();
template void attention_softmax_rows<xsimd::sse4_1>(const AttentionTile&, float*, float*, float*);
template void attention_probs_rows<xsimd::sse4_1>(const AttentionTile&, const float*);
template void attention_dscores_rows<xsimd::sse4_1>(const AttentionTile&, float*, const float*);
template void attention_delta_rows<xsimd::sse4_1>(float*, const float*, const float*, int, int, int);
}  // namespace qkv::kernels

// The row-wise kernels (layernorm, bias + activation, cross-entropy, adam): their table for this set.
#include "kernels/cpu/rowwise_simd.h"
namespace qkv::kernels {
template const RowwiseKernels& rowwise_kernels_for<xsimd::sse4_1>();
}  // namespace qkv::kernels

// The product with quantized weights (gemm_quant): its row kernels and dequantization for this set.
#include "kernels/cpu/gemm_quant_simd.h"
namespace qkv::kernels {
template QuantKernels quant_kernels<xsimd::sse4_1>();
}  // namespace qkv::kernels
