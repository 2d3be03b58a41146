// Token embedding (optionally scaled, as the paper's x * sqrt(d_model)) plus a position table:
//   x[b,t,:] = scale * wte[tokens[b,t],:] + pos[t,:]
// The backward scatters: dwte[token] += scale * dx, dpos[t] += dx (learned positions only). Rows of dwte can
// repeat, so it runs on one thread (a deterministic order); it is a small part of a step.
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void embedding_forward(Span x, const int32_t* tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C) {
  parallel_for(static_cast<int64_t>(B) * T, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int t = static_cast<int>(r % T);
      const float* e = wte.data() + static_cast<size_t>(tokens[r]) * C;
      const float* p = pos.data() + static_cast<size_t>(t) * C;
      float* xr = x.data() + r * C;
      for (int i = 0; i < C; ++i) xr[i] = scale * e[i] + p[i];
    }
  });
}

void embedding_backward(Span dwte, Span dpos, CSpan dx, const int32_t* tokens, float scale, int B, int T, int C) {
  for (int64_t r = 0; r < static_cast<int64_t>(B) * T; ++r) {
    float* de = dwte.data() + static_cast<size_t>(tokens[r]) * C;
    const float* dxr = dx.data() + r * C;
    for (int i = 0; i < C; ++i) de[i] += scale * dxr[i];
    if (!dpos.empty()) {
      float* dp = dpos.data() + static_cast<size_t>(r % T) * C;
      for (int i = 0; i < C; ++i) dp[i] += dxr[i];
    }
  }
}

void sinusoidal_positions(Span pe, int T, int C) {
  // The tutorial's float32 arithmetic: den = exp(-arange(0, C, 2) * ln(10000) / C); pe = sin/cos(pos * den).
  const float log10000 = static_cast<float>(9.210340371976184);
  for (int i = 0; i < C; i += 2) {
    const float den = std::exp(-static_cast<float>(i) * log10000 / static_cast<float>(C));
    for (int t = 0; t < T; ++t) {
      const float a = static_cast<float>(t) * den;
      pe[static_cast<size_t>(t) * C + i] = std::sin(a);
      if (i + 1 < C) pe[static_cast<size_t>(t) * C + i + 1] = std::cos(a);
    }
  }
}

}  // namespace qkv::kernels
