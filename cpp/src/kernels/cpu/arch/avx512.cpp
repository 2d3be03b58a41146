// Instantiates the SIMD kernel bodies for xsimd::avx512f; this file alone is compiled with that set's flags
// (cpp/CMakeLists.txt), so nothing else in the library needs them.
#include "kernels/cpu/gemm_simd.h"

namespace qkv::kernels {
template void gemm_rows<xsimd::avx512f>(const GemmArgs&, int, int);
}  // namespace qkv::kernels
