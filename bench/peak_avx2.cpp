// Instantiates the peak loop for xsimd::fma3<xsimd::avx2>; only this file is compiled with that set's flags
// (CMakeLists.txt).
#include "peak_simd.h"

namespace qkv::bench {
template float fma_loop<xsimd::fma3<xsimd::avx2>>(int64_t);
template int lanes<xsimd::fma3<xsimd::avx2>>();
}  // namespace qkv::bench
