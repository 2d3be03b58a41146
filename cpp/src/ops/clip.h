#pragma once
// Global-norm gradient clipping's factor, one definition for the host and the device (the CUDA optimizer step
// decides it on the GPU: kernels/cuda/adamw.cu), so that both round it the same way.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html
#include <cmath>

#include "ops/dropout_hash.h"  // QKV_HOST_DEVICE

namespace qkv::ops {

// From s = the sum of squares of every gradient (finite): max_norm / (sqrt(s) + 1e-6), in double and rounded to
// float as torch's float32 factor is, where max_norm > 0 and that is below 1; else 1 (no clipping).
QKV_HOST_DEVICE inline float clip_factor(double s, float max_norm) {
  if (!(max_norm > 0.f)) return 1.f;
  const double factor = max_norm / (std::sqrt(s) + 1e-6);
  return factor < 1.0 ? static_cast<float>(factor) : 1.f;
}

}  // namespace qkv::ops
