// Instantiates the peak loop for xsimd::sse4_1; only this file is compiled with that set's flags (CMakeLists.txt).
#include "peak_simd.h"

namespace qkv::bench {
template float fma_loop<xsimd::sse4_1>(int64_t);
template int lanes<xsimd::sse4_1>();
}  // namespace qkv::bench
