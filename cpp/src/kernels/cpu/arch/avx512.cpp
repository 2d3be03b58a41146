// Instantiates the SIMD kernel bodies for xsimd::avx512f; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them.
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template GemmMicroKernel gemm_micro_kernel<xsimd::avx512f>();
}  // namespace qkv::kernels
