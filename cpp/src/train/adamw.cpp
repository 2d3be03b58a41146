#include <cmath>

#include "kernels/kernels.h"
#include "train/optimizer.h"

namespace qkv::train {

double grad_norm(nn::Parameters& params) {
  double sum = 0.0;
  for (float g : params.grads()) sum += static_cast<double>(g) * g;
  return std::sqrt(sum);
}

void clip_grad_norm(nn::Parameters& params, double norm, float max_norm) {
  // As torch: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double scale = max_norm / (norm + 1e-6);
  if (scale >= 1.0) return;
  for (float& g : params.grads()) g = static_cast<float>(g * scale);
}

void adamw_update(nn::Parameters& params, const AdamWConfig& c, int t) {
  for (nn::Param& p : params.all())
    kernels::adamw_step(p.value, p.m, p.v, p.grad, c.lr, c.beta1, c.beta2, c.eps, p.decay ? c.weight_decay : 0.f, t);
}

}  // namespace qkv::train
