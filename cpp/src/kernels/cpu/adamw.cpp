// AdamW, as torch.optim.AdamW does it. reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
//   p -= lr * wd * p                      (decoupled weight decay, before the moment update)
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void adamw_step(Span p, Span m, Span v, CSpan g, float lr, float beta1, float beta2, float eps, float weight_decay,
                int t) {
  const float bc1 = 1.f - std::pow(beta1, static_cast<float>(t));
  const float bc2 = 1.f - std::pow(beta2, static_cast<float>(t));
  const float step = lr / bc1, inv_sqrt_bc2 = 1.f / std::sqrt(bc2);
  parallel_for(static_cast<int64_t>(p.size()) / 4096 + 1, [&](int64_t c0, int64_t c1) {
    const size_t end = std::min(p.size(), static_cast<size_t>(c1) * 4096);
    for (size_t i = static_cast<size_t>(c0) * 4096; i < end; ++i) {
      p[i] -= lr * weight_decay * p[i];
      m[i] = beta1 * m[i] + (1.f - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.f - beta2) * g[i] * g[i];
      p[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  });
}

}  // namespace qkv::kernels
