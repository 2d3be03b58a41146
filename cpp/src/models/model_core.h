#pragma once
// What the three models share: parameters, the optimizer, the workspace, dropout seeding and the steps of
// a training call (zero the gradients, forward, loss, backward, check, update). Each model supplies its
// forward/backward; this keeps the order of a step and its error behaviour in one place.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "nn/dropout.h"
#include "nn/parameters.h"
#include "qkv/error.h"
#include "qkv/memory.h"
#include "qkv/optimizer.h"
#include "qkv/workspace.h"
#include "train/optimizer.h"

namespace qkv::models {

struct ModelCore {
  nn::Parameters params;
  train::Optimizer optimizer;
  Workspace ws;
  uint64_t seed;
  float dropout;
  bool training = true;
  uint64_t passes = 0;  // forward passes run: each gets its own dropout seed

  ModelCore(const OptimizerConfig& o, uint64_t seed_, float dropout_) : optimizer(o), seed(seed_), dropout(dropout_) {}

  // The dropout of the next forward pass: off in eval mode.
  nn::Dropout next_dropout(bool train_pass) {
    ++passes;
    return {train_pass && training ? dropout : 0.f, seed * 0x9E3779B97F4A7C15ull + passes};
  }

  // Set when a micro-batch's loss since the gradients were last zeroed was not finite (NonFinite::Skip):
  // the next optimizer step is then skipped, whatever the gradients of the other micro-batches.
  bool nonfinite_loss = false;

  void zero_grad() {
    params.zero_grad();
    nonfinite_loss = false;
  }

  // Every model checks its loss here, between its forward and its backward. A finite loss returns true:
  // run the backward. A non-finite one throws under NonFinite::Error (nothing is accumulated; the weights
  // are untouched); under Skip it marks the pending optimizer step as skipped and returns false, and the
  // backward is not run (its gradients would be dropped anyway).
  bool check_loss(float loss) {
    if (std::isfinite(loss)) return true;
    check(optimizer.config().non_finite == NonFinite::Skip, "the loss is not finite (", loss,
          "); no gradient was accumulated and the weights are unchanged (try a lower lr)");
    nonfinite_loss = true;
    return false;
  }

  // One optimizer step on the accumulated gradients; false when it was skipped (NonFinite::Skip: a
  // non-finite loss or gradient norm; the gradients are then zeroed). See Optimizer::step.
  bool apply_gradients() {
    const bool finite_loss = !nonfinite_loss;
    nonfinite_loss = false;
    return optimizer.step(params, finite_loss);
  }

  // forward_backward() returns the loss after accumulating gradients (checked with check_loss). A
  // non-finite loss or gradient throws, or under NonFinite::Skip skips the update; either way the weights
  // are untouched.
  template <class F>
  float train_step(F&& forward_backward) {
    zero_grad();
    const float loss = forward_backward();
    apply_gradients();
    return loss;
  }

  MemoryUsage memory() const {
    const size_t weights = params.count() * sizeof(float);
    return {weights, weights, 2 * weights, ws.size_bytes()};
  }

  size_t num_parameters() {
    size_t n = 0;
    for (const nn::Param& p : params.all()) n += p.numel;
    return n;
  }
};

inline void check_positive(int value, const char* name) {
  check(value >= 1, name, " = ", value, " is invalid: expected an integer >= 1");
}

// The checks every model's config shares: the stack's shape and the dropout rate.
template <class Config>
void check_stack(const Config& c) {
  check_positive(c.context, "context");
  check_positive(c.d_model, "d_model");
  check_positive(c.heads, "heads");
  check(c.d_model % c.heads == 0, "d_model = ", c.d_model, " must be divisible by heads = ", c.heads);
  check(c.d_ff >= 0, "d_ff = ", c.d_ff, " is invalid: expected an integer >= 1 (or 0 for 4 * d_model)");
  check(c.dropout >= 0.f && c.dropout < 1.f, "dropout = ", c.dropout, " is invalid: expected 0 <= dropout < 1");
}

// Token ids must lie in [0, V); ids equal to `allowed` (e.g. an ignore index) pass too.
inline void check_ids(std::span<const int32_t> ids, const char* what, int V, int allowed = INT32_MIN) {
  for (size_t i = 0; i < ids.size(); ++i)
    check((ids[i] >= 0 && ids[i] < V) || ids[i] == allowed, what, "[", i, "] = ", ids[i],
          " is out of range: expected a token id in [0, ", V, ")");
}

inline void check_shape(std::span<const int32_t> ids, const char* what, int B, int T, const char* bname,
                        const char* tname) {
  const size_t n = static_cast<size_t>(B) * T;
  check(ids.size() == n, what, " has ", ids.size(), " tokens: expected ", bname, " * ", tname, " = ", B, " * ", T,
        " = ", n);
}

inline void check_dims(int B, int T, int T_max, const char* tname, const char* max_name) {
  check(B >= 1, "batch = ", B, " is invalid: expected an integer >= 1");
  check(T >= 1 && T <= T_max, tname, " = ", T, " is invalid: expected 1 <= ", tname, " <= ", max_name, " = ", T_max);
}

// (B,T) padding flags from token ids: 1 where the id is pad_id.
inline void pad_flags(std::vector<uint8_t>& out, std::span<const int32_t> ids, int pad_id) {
  out.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) out[i] = ids[i] == pad_id ? 1 : 0;
}

}  // namespace qkv::models

#include "kernels/kernels.h"

namespace qkv::models {

// Sums of a cross-entropy evaluation: loss over counted rows, argmax hits, rows counted (not ignored).
struct LossSum {
  double loss = 0.0;
  long long correct = 0, count = 0;

  Metrics metrics() const {
    Metrics m;
    m.count = count;
    m.loss = count ? loss / static_cast<double>(count) : 0.0;
    m.accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
    m.perplexity = std::exp(m.loss);
    return m;
  }
};

// Evaluation: the cross-entropy of logits (rows, V) against targets, and the argmax hits for accuracy.
inline LossSum cross_entropy(Span losses, CSpan logits, const int32_t* targets, int rows, int V, int ignore_index,
                             float smoothing) {
  kernels::crossentropy_forward(losses, logits, targets, rows, V, ignore_index, smoothing);
  LossSum s;
  for (int r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    s.loss += losses[r];
    ++s.count;
    const float* z = logits.data() + static_cast<size_t>(r) * V;
    int best = 0;
    for (int v = 1; v < V; ++v)
      if (z[v] > z[best]) best = v;
    s.correct += best == targets[r];
  }
  return s;
}

// Training: the loss and, in the same sweep, dlogits = weight * d(mean loss)/d logits, the mean over the rows
// whose target is not ignore_index. logits is overwritten with dlogits. The returned sum counts no hits
// (the logits are gone); a batch whose targets are all ignored gets count 0 and a zero gradient.
inline LossSum cross_entropy_with_gradient(Span logits, Span losses, const int32_t* targets, float weight, int rows,
                                           int V, int ignore_index, float smoothing) {
  LossSum s;
  for (int r = 0; r < rows; ++r) s.count += targets[r] != ignore_index;
  const float scale = s.count ? weight / static_cast<float>(s.count) : 0.f;
  kernels::crossentropy_forward_backward(losses, logits, logits, targets, scale, rows, V, ignore_index, smoothing);
  for (int r = 0; r < rows; ++r) s.loss += losses[r];  // ignored rows hold 0
  return s;
}

}  // namespace qkv::models
