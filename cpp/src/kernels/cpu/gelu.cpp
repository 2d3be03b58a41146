// GELU, exact form. reference: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html
//   y = x * Phi(x), Phi(x) = (1 + erf(x / sqrt(2))) / 2
//   dy/dx = Phi(x) + x * phi(x), phi(x) = exp(-x^2/2) / sqrt(2*pi)
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void gelu_forward(Span y, CSpan x) {
  parallel_for(static_cast<int64_t>(x.size()) / 1024 + 1, [&](int64_t c0, int64_t c1) {
    const size_t end = std::min(x.size(), static_cast<size_t>(c1) * 1024);
    for (size_t i = static_cast<size_t>(c0) * 1024; i < end; ++i)
      y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
  });
}

void gelu_backward(Span dx, CSpan dy, CSpan x) {
  const float inv_sqrt_2pi = 0.3989422804014327f;
  parallel_for(static_cast<int64_t>(x.size()) / 1024 + 1, [&](int64_t c0, int64_t c1) {
    const size_t end = std::min(x.size(), static_cast<size_t>(c1) * 1024);
    for (size_t i = static_cast<size_t>(c0) * 1024; i < end; ++i) {
      const float cdf = 0.5f * (1.f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
      const float pdf = inv_sqrt_2pi * std::exp(-0.5f * x[i] * x[i]);
      dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
  });
}

}  // namespace qkv::kernels
