// Token + learned position embedding: x[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
// The backward scatters: dwte[token] += dx, dwpe[t] += dx. Rows of dwte can repeat, so it runs on one
// thread (a deterministic order); it is a small part of a step.
#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void embedding_forward(Span x, const int32_t* tokens, CSpan wte, CSpan wpe, int B, int T, int C) {
  parallel_for(static_cast<int64_t>(B) * T, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int t = static_cast<int>(r % T);
      const float* e = wte.data() + static_cast<size_t>(tokens[r]) * C;
      const float* p = wpe.data() + static_cast<size_t>(t) * C;
      float* xr = x.data() + r * C;
      for (int i = 0; i < C; ++i) xr[i] = e[i] + p[i];
    }
  });
}

void embedding_backward(Span dwte, Span dwpe, CSpan dx, const int32_t* tokens, int B, int T, int C) {
  for (int64_t r = 0; r < static_cast<int64_t>(B) * T; ++r) {
    const int t = static_cast<int>(r % T);
    float* de = dwte.data() + static_cast<size_t>(tokens[r]) * C;
    float* dp = dwpe.data() + static_cast<size_t>(t) * C;
    const float* dxr = dx.data() + r * C;
    for (int i = 0; i < C; ++i) {
      de[i] += dxr[i];
      dp[i] += dxr[i];
    }
  }
}

}  // namespace qkv::kernels
