#pragma once
// Optimizer, learning-rate schedule and gradient clipping, shared by every model.
// reference: https://pytorch.org/docs/stable/generated/torch.optim.Adam.html
// reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
#include <string>

namespace qkv {

enum class OptimizerKind { Adam, AdamW };  // Adam: L2 in the gradient; AdamW: decoupled weight decay
enum class Schedule {
  Constant,     // lr (after an optional linear warm-up)
  InverseSqrt,  // the paper's: lr * min(t / warmup, sqrt(warmup / t)), peak lr at t = warmup
  Cosine,       // linear warm-up, then cosine decay from lr to min_lr at total_steps
};
// What a training step does when its loss or its global gradient norm is not finite (NaN or +-inf).
enum class NonFinite {
  Error,  // throw qkv::Error; the weights, the Adam moments and the step count are unchanged
  Skip,   // do not update: clear the gradients, count the skip and go on (as torch.cuda.amp.GradScaler)
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  bool decay_matrices_only = true;  // decay only tensors with 2+ dimensions (nanoGPT); false: all tensors
  // Clip the global gradient norm to this (as torch's clip_grad_norm_); 0 turns clipping off. The step applies
  // the clip factor inside the update: the gradients a model exposes stay as accumulated.
  float grad_clip = 1.0f;
  Schedule schedule = Schedule::Constant;
  int warmup_steps = 0;
  int total_steps = 0;  // cosine: the step where lr reaches min_lr
  float min_lr = 0.f;
  // A step whose loss or gradient norm is not finite. Under Skip nothing is updated: the weights, the Adam
  // moments and the step count (so the schedule's position) stay as they were, the gradients are zeroed, and
  // the model's skipped_steps() grows by one. With gradient accumulation, one micro-batch with a non-finite
  // loss skips the whole optimizer step (its backward is not run; the other micro-batches' gradients are
  // dropped with it), as a non-finite gradient in any micro-batch does.
  NonFinite non_finite = NonFinite::Error;
};

// Throws qkv::Error naming the field when a value is out of range.
void validate(const OptimizerConfig& config);
// The learning rate of 1-based step t.
float learning_rate_at(const OptimizerConfig& config, int t);

std::string to_string(OptimizerKind k);
std::string to_string(Schedule s);
std::string to_string(NonFinite n);
OptimizerKind parse_optimizer_kind(const std::string& s, const char* field = "optimizer.kind");
Schedule parse_schedule(const std::string& s, const char* field = "optimizer.schedule");
NonFinite parse_non_finite(const std::string& s, const char* field = "optimizer.non_finite");

// What an evaluation reports. accuracy: the fraction of counted positions (or examples) where the argmax
// equals the target; perplexity = exp(loss).
struct Metrics {
  double loss = 0.0;
  double accuracy = 0.0;
  double perplexity = 0.0;
  long long count = 0;  // positions (or examples) counted; ignored targets excluded
};

}  // namespace qkv
