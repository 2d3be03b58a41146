// Instantiates the peak loop for xsimd::avx512f; only this file is compiled with that set's flags (CMakeLists.txt).
#include "peak_simd.h"

namespace qkv::bench {
template float fma_loop<xsimd::avx512f>(int64_t);
template int lanes<xsimd::avx512f>();
}  // namespace qkv::bench
