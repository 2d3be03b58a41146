// Instantiates the SIMD kernel bodies for xsimd::sse4_1; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them.
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::sse4_1>();
}  // namespace qkv::kernels
