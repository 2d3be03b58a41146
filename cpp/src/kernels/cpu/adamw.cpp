// Adam and AdamW, as torch.optim does them.
// reference: https://pytorch.org/docs/stable/generated/torch.optim.Adam.html
// reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
//   AdamW: p *= 1 - lr * wd (decoupled, before the update);  Adam: g += wd * p (L2 in the gradient)
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void adam_step(Span p, Span m, Span v, CSpan g, float lr, float beta1, float beta2, float eps, float weight_decay,
               bool decoupled, int t) {
  // The scalars in double, then float, as torch computes them in Python before the tensor ops.
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  const float step = static_cast<float>(lr / bc1), sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float l2 = decoupled ? 0.f : weight_decay;
  const float shrink = static_cast<float>(1.0 - (decoupled ? static_cast<double>(lr) * weight_decay : 0.0));
  parallel_for(static_cast<int64_t>(p.size()) / 4096 + 1, [&](int64_t c0, int64_t c1) {
    const size_t end = std::min(p.size(), static_cast<size_t>(c1) * 4096);
    for (size_t i = static_cast<size_t>(c0) * 4096; i < end; ++i) {
      const float gi = g[i] + l2 * p[i];
      p[i] *= shrink;
      m[i] = beta1 * m[i] + (1.f - beta1) * gi;
      v[i] = beta2 * v[i] + (1.f - beta2) * gi * gi;
      p[i] -= step * (m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps));
    }
  });
}

}  // namespace qkv::kernels
