#include <cmath>

#include "kernels/kernels.h"
#include "qkv/error.h"
#include "train/optimizer.h"

namespace qkv {

void validate(const OptimizerConfig& o) {
  check(std::isfinite(o.lr) && o.lr >= 0.f, "lr = ", o.lr, " is invalid: expected a finite number >= 0");
  check(o.beta1 >= 0.f && o.beta1 < 1.f, "beta1 = ", o.beta1, " is invalid: expected 0 <= beta1 < 1");
  check(o.beta2 >= 0.f && o.beta2 < 1.f, "beta2 = ", o.beta2, " is invalid: expected 0 <= beta2 < 1");
  check(std::isfinite(o.eps) && o.eps > 0.f, "eps = ", o.eps, " is invalid: expected a finite number > 0");
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0.f, "weight_decay = ", o.weight_decay,
        " is invalid: expected a finite number >= 0");
  check(std::isfinite(o.grad_clip) && o.grad_clip >= 0.f, "grad_clip = ", o.grad_clip,
        " is invalid: expected a finite number >= 0 (0 turns clipping off)");
  check(o.warmup_steps >= 0, "warmup_steps = ", o.warmup_steps, " is invalid: expected an integer >= 0");
  check(o.schedule != Schedule::InverseSqrt || o.warmup_steps >= 1, "warmup_steps = ", o.warmup_steps,
        " is invalid for the inverse square root schedule: expected an integer >= 1");
  check(o.schedule != Schedule::Cosine || o.total_steps > o.warmup_steps, "total_steps = ", o.total_steps,
        " is invalid for the cosine schedule: expected more than warmup_steps = ", o.warmup_steps);
  check(std::isfinite(o.min_lr) && o.min_lr >= 0.f && o.min_lr <= o.lr, "min_lr = ", o.min_lr,
        " is invalid: expected 0 <= min_lr <= lr = ", o.lr);
}

float learning_rate_at(const OptimizerConfig& o, int t) {
  const double lr = o.lr, w = o.warmup_steps;
  switch (o.schedule) {
    case Schedule::Constant: return static_cast<float>(w > 0 && t < w ? lr * t / w : lr);
    case Schedule::InverseSqrt: return static_cast<float>(lr * std::min(t / w, std::sqrt(w / t)));
    case Schedule::Cosine: {
      if (t < w) return static_cast<float>(lr * t / w);
      if (t >= o.total_steps) return o.min_lr;
      const double progress = (t - w) / (o.total_steps - w);
      return static_cast<float>(o.min_lr + 0.5 * (lr - o.min_lr) * (1.0 + std::cos(M_PI * progress)));
    }
  }
  return o.lr;
}

std::string to_string(OptimizerKind k) { return k == OptimizerKind::Adam ? "adam" : "adamw"; }
std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::Constant: return "constant";
    case Schedule::InverseSqrt: return "inverse_sqrt";
    case Schedule::Cosine: return "cosine";
  }
  return "constant";
}
OptimizerKind parse_optimizer_kind(const std::string& s, const char* field) {
  if (s == "adam") return OptimizerKind::Adam;
  if (s == "adamw") return OptimizerKind::AdamW;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"adam\" or \"adamw\""));
}
Schedule parse_schedule(const std::string& s, const char* field) {
  if (s == "constant") return Schedule::Constant;
  if (s == "inverse_sqrt") return Schedule::InverseSqrt;
  if (s == "cosine") return Schedule::Cosine;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"constant\", \"inverse_sqrt\" or \"cosine\""));
}

namespace train {

double grad_norm(nn::Parameters& params) { return std::sqrt(kernels::sum_squares(params.grads())); }

Optimizer::Optimizer(const OptimizerConfig& config) : config_(config) { validate(config_); }

void Optimizer::set_learning_rate(float lr) {
  check(std::isfinite(lr) && lr >= 0.f, "lr = ", lr, " is invalid: expected a finite number >= 0");
  config_.lr = lr;
  config_.schedule = Schedule::Constant;
  config_.warmup_steps = 0;
  config_.min_lr = std::min(config_.min_lr, lr);
}

double Optimizer::step(nn::Parameters& params) {
  const double norm = grad_norm(params);
  check(std::isfinite(norm), "the gradient norm (", norm,
        ") is not finite; the step was skipped and the weights are unchanged (try a lower lr)");
  // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1, a float32
  // factor as torch's. The update applies it; the gradients themselves are left as accumulated.
  float grad_scale = 1.f;
  if (config_.grad_clip > 0.f) {
    const double scale = config_.grad_clip / (norm + 1e-6);
    if (scale < 1.0) grad_scale = static_cast<float>(scale);
  }
  ++t_;
  // One pass over the flat buffers: each tensor's weight decay as a range, adjacent tensors with the same
  // decay merged (the padding between them is 0 and stays 0).
  ranges_.clear();
  for (const nn::Param& p : params.all()) {
    const float wd = config_.decay_matrices_only && !p.decay ? 0.f : config_.weight_decay;
    if (!ranges_.empty() && ranges_.back().weight_decay == wd)
      ranges_.back().end = p.offset + p.numel;
    else
      ranges_.push_back({p.offset, p.offset + p.numel, wd});
  }
  const kernels::AdamHyper h{learning_rate_at(config_, t_),
                             config_.beta1,
                             config_.beta2,
                             config_.eps,
                             config_.kind == OptimizerKind::AdamW,
                             t_,
                             grad_scale};
  kernels::adam_step(params.values(), params.moments1(), params.moments2(), params.grads(), ranges_, h);
  return norm;
}

}  // namespace train
}  // namespace qkv
