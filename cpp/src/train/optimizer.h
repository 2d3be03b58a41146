#pragma once
// The optimizer state machine over a model's Parameters: gradient norm, the non-finite check, clipping,
// the schedule and the Adam(W) update of every tensor.
#include <array>
#include <optional>
#include <vector>

#include "nn/parameters.h"
#include "qkv/optimizer.h"
#include "qkv/tensor.h"

namespace qkv::train {

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config);

  // Applies the accumulated gradients and returns true. When the gradient norm is not finite, or
  // finite_loss is false (a micro-batch's loss was not finite, so its backward was not run), no update
  // happens: under NonFinite::Error it throws qkv::Error (the gradients left as they are); under
  // NonFinite::Skip it zeroes the gradients, counts the skip and returns false. Either way the weights,
  // the moments and t are unchanged. step() is queue() then finish().
  bool step(nn::Parameters& params, bool finite_loss = true);

  // The step in two halves, so that a training step can be queued whole before the host waits (models/
  // model_core.h): queue() puts the update on the device, gated there on the gradients' norm and on `gate`
  // (device values that must all be finite: the step's per-row losses; may be empty); finish() then reads what
  // happened and answers as step() does. finite_loss false: the host saw a non-finite loss (the gate kept the
  // update from happening, if it was queued at all).
  void queue(nn::Parameters& params, CSpan gate);
  bool finish(nn::Parameters& params, bool finite_loss);

  const OptimizerConfig& config() const { return config_; }
  void set_learning_rate(float lr);
  void set_non_finite(NonFinite policy) { config_.non_finite = policy; }
  int steps() const { return t_; }
  void set_steps(int t) { t_ = t; }
  // Steps not taken under NonFinite::Skip (not counted in steps()), and whether the last step() was one.
  int skipped() const { return skipped_; }
  void set_skipped(int n) { skipped_ = n; }
  bool last_skipped() const { return last_skipped_; }
  float current_lr() const { return learning_rate_at(config_, t_ + 1); }

 private:
  // A step not taken (a non-finite loss or norm): throws under NonFinite::Error, else zeroes the gradients,
  // counts the skip and returns false.
  bool refuse(nn::Parameters& params, double norm, bool finite_loss);

  OptimizerConfig config_;
  int t_ = 0;
  int skipped_ = 0;
  bool last_skipped_ = false;
  // The ops' scratch on the parameters' device (the CUDA backend's uploaded ranges and partial sums), kept
  // across steps and remade only when the model moves or the ranges grow.
  Span scratch(nn::Parameters& params, size_t floats);

  std::vector<ops::AdamRange> ranges_;  // per step, reusing its capacity
  bool queued_ = false;                 // a step was queued and not yet finished
  // Its sums, where the backend decided on the host and returned them (else clipped_adam_sums reads them).
  std::optional<std::array<double, 2>> sums_;
  Tensor scratch_;
};

}  // namespace qkv::train
