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
  // The step's ranges and the ops' scratch, made before queue() or queue_ahead() (which use them) and outside a
  // training step queued whole, which may allocate nothing (a CUDA graph's capture cannot).
  void reserve(nn::Parameters& params);

  // Steps in flight (models/model_core.h: queue_train_step), on a backend that decides on the device: queue_ahead()
  // queues a step behind the ahead() steps queued and not yet settled, whose outcome the device knows and the host
  // does not (ops/adam_plan.h: the device picks this step's t); sums_span() is where its sums will be, for
  // Backend::read_later right after the step; settle() answers for the oldest step in flight from its sums, read
  // later, as finish() does, with `last` saying whether it is the last step queued (a skip then zeroes the
  // gradients, which are that step's; behind it they are the next step's). Under NonFinite::Error a refusal
  // throws, and every step queued behind it has written nothing (the device halted them): drop_ahead() forgets
  // them.
  void queue_ahead(nn::Parameters& params, CSpan gate);
  CSpan sums_span(nn::Parameters& params);
  bool settle(nn::Parameters& params, bool finite_loss, const std::array<double, 2>& sums, bool last);
  int ahead() const { return ahead_; }
  void drop_ahead() { ahead_ = 0; }
  void set_ahead(int n) { ahead_ = n; }  // a step queued and then not run (models/model_core.h: queue_step)
  // The host refused a step the device had queued under NonFinite::Error for its loss (and threw): the device
  // halted on it (ops/adam_plan.h), and the steps queued from now on run again.
  void end_halt() {
    queued_ = false;
    ++epoch_;
  }

  // Forgets every step (t, skips, the device's step state): a fresh optimizer with the same settings (LoRA adapters
  // added or removed: the parameters it updates change).
  void restart() { *this = Optimizer(config_); }

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
  bool refuse(nn::Parameters& params, double norm, bool finite_loss, bool zero_grads = true);
  void queue_plan(nn::Parameters& params, CSpan gate, int ahead);
  void make_ranges(nn::Parameters& params);
  bool decide(nn::Parameters& params, const std::array<double, 2>& sums, bool zero_grads);

  OptimizerConfig config_;
  int t_ = 0;
  int skipped_ = 0;
  bool last_skipped_ = false;
  // The ops' scratch on the parameters' device (the CUDA backend's uploaded ranges and partial sums), kept
  // across steps and remade only when the model moves or the ranges grow.
  Span scratch(nn::Parameters& params, size_t floats);

  std::vector<ops::AdamRange> ranges_;  // per step, reusing its capacity
  bool queued_ = false;                 // a step was queued and not yet finished
  int ahead_ = 0;                       // steps queued by queue_ahead and not yet settled
  // The host's copy of the device's AdamState (ops/adam_plan.h) as of the steps settled: the steps taken since
  // the scratch was made, and the epoch that a refusal under NonFinite::Error ends.
  int taken_ = 0;
  int epoch_ = 0;
  // Its sums, where the backend decided on the host and returned them (else clipped_adam_sums reads them).
  std::optional<std::array<double, 2>> sums_;
  Tensor scratch_;
};

}  // namespace qkv::train
