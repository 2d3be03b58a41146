#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "qkv/error.h"
#include "train/optimizer.h"

namespace qkv::train {

Span Optimizer::scratch(nn::Parameters& params, size_t floats) {
  if (scratch_.device() != params.device() || scratch_.numel() < floats) {
    // A new scratch starts a new AdamState (zeroed): nothing may be in flight on the old one.
    check(ahead_ == 0, "Optimizer: the step scratch cannot be remade with ", ahead_, " steps in flight");
    scratch_ = Tensor({static_cast<int64_t>(std::max(floats, scratch_.numel()))}, params.device());
    taken_ = 0;
  }
  return scratch_.span().first(floats);
}

Optimizer::Optimizer(const OptimizerConfig& config) : config_(config) { validate(config_); }

void Optimizer::set_learning_rate(float lr) {
  check(std::isfinite(lr) && lr >= 0.f, "lr = ", lr, " is invalid: expected a finite number >= 0");
  config_.lr = lr;
  config_.schedule = Schedule::Constant;
  config_.warmup_steps = 0;
  config_.min_lr = std::min(config_.min_lr, lr);
}

bool Optimizer::refuse(nn::Parameters& params, double norm, bool finite_loss, bool zero_grads) {
  if (config_.non_finite == NonFinite::Error) {
    ++epoch_;  // the device halted the steps behind this one; the next queued runs again
    check(finite_loss, "a loss since the gradients were zeroed is not finite; the step was skipped and the ",
          "weights are unchanged (try a lower lr)");
    throw Error(detail::cat("the gradient norm (", norm,
                            ") is not finite; the step was skipped and the weights are unchanged (try a lower lr)"));
  }
  // GradScaler's skip: no update, t (and so the schedule) stays, the next step starts from clean gradients.
  if (zero_grads) params.zero_grad();
  ++skipped_;
  last_skipped_ = true;
  return false;
}

bool Optimizer::step(nn::Parameters& params, bool finite_loss) {
  // A non-finite loss never ran its backward, so the norm would not see it: the model passes it in.
  if (!finite_loss) return finish(params, false);
  reserve(params);
  queue(params, {});
  return finish(params, true);
}

void Optimizer::queue(nn::Parameters& params, CSpan gate) {
  check(ahead_ == 0, "Optimizer::queue: ", ahead_, " steps in flight are not settled");
  queue_plan(params, gate, 0);
  queued_ = true;
}

void Optimizer::queue_ahead(nn::Parameters& params, CSpan gate) {
  check(!queued_, "Optimizer::queue_ahead: a step queued by queue() is not finished");
  check(ahead_ <= ops::kMaxStepsAhead, "Optimizer::queue_ahead: ", ahead_, " steps in flight; at most ",
        ops::kMaxStepsAhead, " may be ahead of a step");
  queue_plan(params, gate, ahead_);
  ++ahead_;
}

void Optimizer::reserve(nn::Parameters& params) {
  make_ranges(params);
  scratch(params, params.ops().clipped_adam_scratch_size(ranges_.size()));
}

void Optimizer::make_ranges(nn::Parameters& params) {
  // One pass over the flat buffers: each tensor's weight decay as a range, adjacent tensors with the same
  // decay merged (the padding between them is 0 and stays 0). Under ZeRO-1 only the part [b, e) of the layout
  // whose moments this replica keeps is updated (parallel/ gathers the other ranks' parts); ranges are then
  // relative to b.
  const size_t b = params.moments_begin(), e = b + params.moments1().size();
  ranges_.clear();
  for (const nn::Param& p : params.all()) {
    const size_t from = std::max(p.offset, b), to = std::min(p.offset + p.numel, e);
    if (from >= to) continue;
    const float wd = config_.decay_matrices_only && !p.decay ? 0.f : config_.weight_decay;
    if (!ranges_.empty() && ranges_.back().weight_decay == wd)
      ranges_.back().end = to - b;
    else
      ranges_.push_back({from - b, to - b, wd});
  }
}

void Optimizer::queue_plan(nn::Parameters& params, CSpan gate, int ahead) {
  // ranges_: reserve()'s, made before the step (Optimizer::step, models/model_core.h: queue_step).
  const size_t b = params.moments_begin(), e = b + params.moments1().size();
  // The step t + 1 if it is taken, or with steps ahead undecided, t + 1 + (how many of them are taken): the
  // device picks (ops/adam_plan.h). The clipping factor (torch.nn.utils.clip_grad_norm_'s: ops/clip.h) and the
  // decision to skip come from the gradients' norm and the gate, made by the backend between its sums of squares
  // and the update (on the GPU, without a round trip to the host); the gradients themselves are left as
  // accumulated.
  ops::AdamPlan plan{};
  for (int j = 0; j <= ahead; ++j)
    plan.hyper[j] = ops::AdamHyper{learning_rate_at(config_, t_ + 1 + j),
                                   config_.beta1,
                                   config_.beta2,
                                   config_.eps,
                                   config_.kind == OptimizerKind::AdamW,
                                   t_ + 1 + j,
                                   1.f};
  plan.ahead = ahead;
  plan.epoch = epoch_;
  plan.halt = config_.non_finite == NonFinite::Error ? 1 : 0;
  ops::Backend& ops = params.ops();
  const Span s = scratch(params, ops.clipped_adam_scratch_size(ranges_.size()));
  plan.base = taken_;
  sums_ = ops.clipped_adam_step(params.values().subspan(b, e - b), params.moments1(), params.moments2(),
                                params.grads().subspan(b, e - b), params.grads(), gate, ranges_, plan,
                                config_.grad_clip, s);
}

CSpan Optimizer::sums_span(nn::Parameters& params) { return params.ops().clipped_adam_sums_span(scratch_.span()); }

bool Optimizer::settle(nn::Parameters& params, bool finite_loss, const std::array<double, 2>& sums, bool last) {
  check(ahead_ > 0, "Optimizer::settle: no step is in flight");
  --ahead_;
  last_skipped_ = false;
  if (!finite_loss) return refuse(params, std::numeric_limits<double>::quiet_NaN(), false, last);
  return decide(params, sums, last);
}

bool Optimizer::decide(nn::Parameters& params, const std::array<double, 2>& sums, bool zero_grads) {
  if (!std::isfinite(sums[1])) return refuse(params, std::numeric_limits<double>::quiet_NaN(), false, zero_grads);
  const double norm = std::sqrt(sums[0]);
  // Not finite: nothing was updated (the weights, the moments and t are unchanged).
  if (!std::isfinite(norm)) return refuse(params, norm, true, zero_grads);
  ++t_;
  ++taken_;
  return true;
}

bool Optimizer::finish(nn::Parameters& params, bool finite_loss) {
  last_skipped_ = false;
  const bool queued = std::exchange(queued_, false);
  if (!finite_loss) return refuse(params, std::numeric_limits<double>::quiet_NaN(), false);
  check(queued, "Optimizer::finish: no step was queued");
  const std::array<double, 2> sums = sums_ ? *sums_ : params.ops().clipped_adam_sums(scratch_.span());
  return decide(params, sums, true);
}

}  // namespace qkv::train
