#pragma once
// The body of the peak-FLOP/s loop (declared in peak.h), one per instruction set: kFmaChains
// independent accumulators, each updated by one fused multiply-add per iteration, all in registers. With two
// FMA units of latency 4 cycles, 8 chains keep both busy; 12 leave headroom and still fit in 16 vector
// registers beside the two constants (AVX2 and SSE have 16, AVX-512 has 32). Instantiated in peak_<isa>.cpp.
#include <xsimd/xsimd.hpp>

#include "peak.h"

namespace qkv::bench {

template <class Arch>
float fma_loop(int64_t iterations) {
  using V = xsimd::batch<float, Arch>;
  // acc = acc * m + a with m just below 1 converges to a / (1 - m): no overflow, no denormals. The values
  // come from volatiles so that the compiler cannot precompute a chain (it does when one starts at a fixed point).
  static volatile float m_value = 0.999999f, a_value = 1e-6f, start = 0.5f;
  const V m(m_value), a(a_value);
  V acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = V(start + float(c));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kFmaChains; ++c) acc[c] = xsimd::fma(acc[c], m, a);
  }
  V sum = acc[0];
  for (int c = 1; c < kFmaChains; ++c) sum += acc[c];
  return xsimd::hadd(sum);
}

template <class Arch>
int lanes() {
  return int(xsimd::batch<float, Arch>::size);
}

}  // namespace qkv::bench
