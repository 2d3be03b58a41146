// OptimizerConfig (qkv/optimizer.h): its validation, the learning-rate schedules and the names of its
// enums. Kept apart from the Optimizer (adamw.cpp) so that the config reader, which is fuzzed, links
// without the kernels.
#include <algorithm>
#include <cmath>

#include "qkv/error.h"
#include "qkv/optimizer.h"

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
std::string to_string(NonFinite n) { return n == NonFinite::Skip ? "skip" : "error"; }
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
NonFinite parse_non_finite(const std::string& s, const char* field) {
  if (s == "error") return NonFinite::Error;
  if (s == "skip") return NonFinite::Skip;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"error\" or \"skip\""));
}

}  // namespace qkv
