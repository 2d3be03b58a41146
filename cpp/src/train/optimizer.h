#pragma once
// The optimizer state machine over a model's Parameters: gradient norm, the non-finite check, clipping,
// the schedule and the Adam(W) update of every tensor.
#include <vector>

#include "kernels/kernels.h"
#include "nn/parameters.h"
#include "qkv/optimizer.h"

namespace qkv::train {

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config);

  // Applies the accumulated gradients. Throws qkv::Error, leaving the weights unchanged, when the gradient
  // norm is not finite. Returns the norm before clipping.
  double step(nn::Parameters& params);

  const OptimizerConfig& config() const { return config_; }
  void set_learning_rate(float lr);
  int steps() const { return t_; }
  void set_steps(int t) { t_ = t; }
  float current_lr() const { return learning_rate_at(config_, t_ + 1); }

 private:
  OptimizerConfig config_;
  int t_ = 0;
  std::vector<kernels::AdamRange> ranges_;  // per step, reusing its capacity
};

// The global L2 norm of all gradients (summed in double across blocks).
double grad_norm(nn::Parameters& params);

}  // namespace qkv::train
