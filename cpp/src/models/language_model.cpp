// LanguageModel: wiring of the layers, input validation, the training step and sampling.
// Legend: B batch, T sequence, C d_model, V vocabulary, L layers.
#include "qkv/language_model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "kernels/kernels.h"
#include "nn/block.h"
#include "nn/embedding.h"
#include "nn/layernorm.h"
#include "qkv/error.h"
#include "qkv/workspace.h"
#include "runtime/random.h"
#include "train/optimizer.h"

namespace qkv {
namespace {

const LanguageModelConfig& validated(const LanguageModelConfig& c) {
  check(c.vocab_size >= 1, "vocab_size = ", c.vocab_size, " is invalid: expected an integer >= 1");
  check(c.context >= 1, "context = ", c.context, " is invalid: expected an integer >= 1");
  check(c.d_model >= 1, "d_model = ", c.d_model, " is invalid: expected an integer >= 1");
  check(c.heads >= 1, "heads = ", c.heads, " is invalid: expected an integer >= 1");
  check(c.layers >= 1, "layers = ", c.layers, " is invalid: expected an integer >= 1");
  check(c.d_ff >= 0, "d_ff = ", c.d_ff, " is invalid: expected an integer >= 1 (or 0 for 4 * d_model)");
  check(c.d_model % c.heads == 0, "d_model = ", c.d_model, " must be divisible by heads = ", c.heads);
  // Keep every buffer index within 32-bit ints in the kernels: (B*T) rows x max(V, 4C) columns.
  check(static_cast<int64_t>(c.vocab_size) * c.d_model < (int64_t{1} << 31),
        "vocab_size * d_model = ", static_cast<int64_t>(c.vocab_size) * c.d_model, " is too large: expected < 2^31");
  return c;
}

const AdamWConfig& validated(const AdamWConfig& o) {
  check(std::isfinite(o.lr) && o.lr >= 0.f, "lr = ", o.lr, " is invalid: expected a finite number >= 0");
  check(o.beta1 >= 0.f && o.beta1 < 1.f, "beta1 = ", o.beta1, " is invalid: expected 0 <= beta1 < 1");
  check(o.beta2 >= 0.f && o.beta2 < 1.f, "beta2 = ", o.beta2, " is invalid: expected 0 <= beta2 < 1");
  check(std::isfinite(o.eps) && o.eps > 0.f, "eps = ", o.eps, " is invalid: expected a finite number > 0");
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0.f, "weight_decay = ", o.weight_decay,
        " is invalid: expected a finite number >= 0");
  check(std::isfinite(o.grad_clip) && o.grad_clip >= 0.f, "grad_clip = ", o.grad_clip,
        " is invalid: expected a finite number >= 0 (0 turns clipping off)");
  return o;
}

}  // namespace

struct LanguageModel::Impl {
  LanguageModelConfig config;
  AdamWConfig optimizer;
  int C, V, L, F;
  nn::Parameters params;
  nn::Embedding embedding;
  std::vector<std::unique_ptr<nn::Block>> blocks;
  nn::LayerNorm ln_f;
  int t = 0;  // optimizer steps taken

  // The workspace and the model-level buffers in it, planned for (B_cap, T_cap).
  Workspace ws;
  int B_cap = 0, T_cap = 0;
  std::vector<Span> xs;  // residual stream before each block and after the last: L+1 of (B,T,C)
  Span ln_f_out, logits, probs, losses, d_res_a, d_res_b, d_ln_f;
  std::vector<int32_t> tokens, targets;  // copies of the current batch, (B,T)

  Impl(const LanguageModelConfig& c, const AdamWConfig& o)
      : config(validated(c)),
        optimizer(validated(o)),
        C(c.d_model),
        V(c.vocab_size),
        L(c.layers),
        F(c.d_ff > 0 ? c.d_ff : 4 * c.d_model),
        embedding(params, V, c.context, C, 0.02f),
        blocks(make_blocks()),
        ln_f(params, "norm", C) {
    params.finalize(c.seed);
  }

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2L)).
  std::vector<std::unique_ptr<nn::Block>> make_blocks() {
    const float out_std = 0.02f / std::sqrt(2.f * L);
    std::vector<std::unique_ptr<nn::Block>> out;
    for (int l = 0; l < L; ++l)
      out.push_back(
          std::make_unique<nn::Block>(params, "layers." + std::to_string(l) + ".", C, config.heads, F, 0.02f, out_std));
    return out;
  }

  void ensure_capacity(int B, int T) {
    if (B <= B_cap && T <= T_cap) return;
    B_cap = std::max(B, B_cap);
    T_cap = std::max(T, T_cap);
    ws.plan([&](Workspace& w) {
      const size_t rows = static_cast<size_t>(B_cap) * T_cap;
      xs.assign(static_cast<size_t>(L) + 1, Span{});
      for (auto& x : xs) x = w.take(rows * C);
      for (auto& b : blocks) b->plan(w, B_cap, T_cap);
      ln_f.plan(w, static_cast<int>(rows));
      ln_f_out = w.take(rows * C);
      logits = w.take(rows * V);
      probs = w.take(rows * V);
      losses = w.take(rows);
      d_res_a = w.take(rows * C);
      d_res_b = w.take(rows * C);
      d_ln_f = w.take(rows * C);
    });
    tokens.reserve(static_cast<size_t>(B_cap) * T_cap);
    targets.reserve(static_cast<size_t>(B_cap) * T_cap);
  }

  void check_ids(std::span<const int32_t> ids, const char* what) const {
    for (size_t i = 0; i < ids.size(); ++i)
      check(ids[i] >= 0 && ids[i] < V, what, "[", i, "] = ", ids[i], " is out of range: expected a token id in [0, ", V,
            ")");
  }

  void check_batch(std::span<const int32_t> inputs, const std::span<const int32_t>* targets_in, int B, int T) const {
    check(B >= 1, "batch = ", B, " is invalid: expected an integer >= 1");
    check(T >= 1 && T <= config.context, "seq = ", T, " is invalid: expected 1 <= seq <= context = ", config.context);
    const size_t n = static_cast<size_t>(B) * T;
    check(inputs.size() == n, "inputs has ", inputs.size(), " tokens: expected batch * seq = ", B, " * ", T, " = ", n);
    check_ids(inputs, "inputs");
    if (targets_in) {
      check(targets_in->size() == n, "targets has ", targets_in->size(), " tokens: expected batch * seq = ", B, " * ",
            T, " = ", n);
      check_ids(*targets_in, "targets");
    }
  }

  // tokens (B,T) -> logits (B,T,V)
  void forward(int B, int T) {
    const int rows = B * T;
    embedding.forward(xs[0], tokens.data(), B, T);
    for (int l = 0; l < L; ++l) blocks[l]->forward(xs[l + 1], xs[l], B, T);
    ln_f.forward(ln_f_out, xs[L], rows);
    // LM head tied to the token embedding: logits = ln_f_out (rows,C) wte^T (C,V)
    const float* wte = embedding.token_weight().value.data();
    kernels::gemm(false, true, rows, V, C, 1.f, ln_f_out.data(), C, wte, C, 0.f, logits.data(), V);
  }

  // Mean cross-entropy of logits against targets; probs saved for the backward.
  float loss(int rows) {
    kernels::crossentropy_forward(losses, probs, logits, targets.data(), rows, V);
    double sum = 0.0;
    for (int r = 0; r < rows; ++r) sum += losses[r];
    return static_cast<float>(sum / rows);
  }

  // Gradients of the mean loss into params' grads (which accumulate; the caller zeroes them).
  void backward(int B, int T) {
    const int rows = B * T;
    const size_t n = static_cast<size_t>(rows) * C;
    Span dlogits = logits;  // the logits are no longer needed: reuse their buffer
    kernels::crossentropy_backward(dlogits, probs, targets.data(), 1.f / rows, rows, V);
    nn::Param& wte = embedding.token_weight();
    // d ln_f_out (rows,C) = dlogits (rows,V) wte (V,C);  d wte (V,C) += dlogits^T ln_f_out
    kernels::gemm(false, false, rows, C, V, 1.f, dlogits.data(), V, wte.value.data(), C, 0.f, d_ln_f.data(), C);
    kernels::gemm(true, false, V, C, rows, 1.f, dlogits.data(), V, ln_f_out.data(), C, 1.f, wte.grad.data(), C);
    std::fill_n(d_res_a.begin(), n, 0.f);
    ln_f.backward(d_res_a, d_ln_f, xs[L], rows);
    Span d_out = d_res_a, d_in = d_res_b;
    for (int l = L - 1; l >= 0; --l) {
      blocks[l]->backward(d_in, d_out, xs[l], B, T);
      std::swap(d_in, d_out);
    }
    embedding.backward(d_out, tokens.data(), B, T);
  }

  float forward_backward(std::span<const int32_t> in, std::span<const int32_t> tg, int B, int T) {
    check_batch(in, &tg, B, T);
    ensure_capacity(B, T);
    tokens.assign(in.begin(), in.end());
    targets.assign(tg.begin(), tg.end());
    forward(B, T);
    const float l = loss(B * T);
    params.zero_grad();
    backward(B, T);
    return l;
  }
};

LanguageModel::LanguageModel(const LanguageModelConfig& config, const AdamWConfig& optimizer)
    : impl_(std::make_unique<Impl>(config, optimizer)) {}

LanguageModel::~LanguageModel() = default;

float LanguageModel::forward_backward(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch,
                                      int seq) {
  return impl_->forward_backward(inputs, targets, batch, seq);
}

float LanguageModel::train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq) {
  Impl& m = *impl_;
  const float loss = m.forward_backward(inputs, targets, batch, seq);
  const double norm = train::grad_norm(m.params);
  // A non-finite loss or gradient must not reach the weights: stop here, weights unchanged.
  check(std::isfinite(loss) && std::isfinite(norm), "train_step: the loss (", loss, ") or gradient norm (", norm,
        ") is not finite; the step was skipped and the weights are unchanged (try a lower lr)");
  if (m.optimizer.grad_clip > 0.f) train::clip_grad_norm(m.params, norm, m.optimizer.grad_clip);
  ++m.t;
  train::adamw_update(m.params, m.optimizer, m.t);
  return loss;
}

float LanguageModel::evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq) {
  Impl& m = *impl_;
  m.check_batch(inputs, &targets, batch, seq);
  m.ensure_capacity(batch, seq);
  m.tokens.assign(inputs.begin(), inputs.end());
  m.targets.assign(targets.begin(), targets.end());
  m.forward(batch, seq);
  return m.loss(batch * seq);
}

std::vector<float> LanguageModel::logits(std::span<const int32_t> inputs, int batch, int seq) {
  Impl& m = *impl_;
  m.check_batch(inputs, nullptr, batch, seq);
  m.ensure_capacity(batch, seq);
  m.tokens.assign(inputs.begin(), inputs.end());
  m.forward(batch, seq);
  const size_t n = static_cast<size_t>(batch) * seq * m.V;
  return {m.logits.begin(), m.logits.begin() + static_cast<std::ptrdiff_t>(n)};
}

std::vector<int32_t> LanguageModel::generate(std::span<const int32_t> prompt, int max_tokens, float temperature,
                                             uint64_t seed) {
  Impl& m = *impl_;
  check(!prompt.empty(), "prompt is empty: expected at least one token id");
  m.check_ids(prompt, "prompt");
  check(max_tokens >= 0, "max_tokens = ", max_tokens, " is invalid: expected an integer >= 0");
  check(std::isfinite(temperature) && temperature >= 0.f, "temperature = ", temperature,
        " is invalid: expected a finite number >= 0 (0 = greedy)");
  m.ensure_capacity(1, m.config.context);
  std::vector<int32_t> context(prompt.begin(), prompt.end()), out;
  out.reserve(static_cast<size_t>(max_tokens));
  std::vector<double> p(static_cast<size_t>(m.V));
  Rng rng(seed);
  for (int i = 0; i < max_tokens; ++i) {
    // No KV cache yet: each token re-runs the (sliding) context window.
    const int T = std::min<int>(static_cast<int>(context.size()), m.config.context);
    m.tokens.assign(context.end() - T, context.end());
    m.forward(1, T);
    const float* z = m.logits.data() + static_cast<size_t>(T - 1) * m.V;
    int32_t next = 0;
    if (temperature == 0.f) {
      next = static_cast<int32_t>(std::max_element(z, z + m.V) - z);
    } else {
      // Sample from softmax(z / temperature), in double.
      const double mx = *std::max_element(z, z + m.V);
      double sum = 0.0;
      for (int v = 0; v < m.V; ++v) sum += p[v] = std::exp((z[v] - mx) / temperature);
      double u = rng.uniform() * sum;
      next = m.V - 1;
      for (int v = 0; v < m.V; ++v) {
        if ((u -= p[v]) < 0.0) {
          next = v;
          break;
        }
      }
    }
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

const LanguageModelConfig& LanguageModel::config() const { return impl_->config; }
const AdamWConfig& LanguageModel::optimizer() const { return impl_->optimizer; }
int LanguageModel::step() const { return impl_->t; }

void LanguageModel::set_learning_rate(float lr) {
  check(std::isfinite(lr) && lr >= 0.f, "lr = ", lr, " is invalid: expected a finite number >= 0");
  impl_->optimizer.lr = lr;
}

size_t LanguageModel::num_parameters() const {
  size_t n = 0;
  for (const nn::Param& p : impl_->params.all()) n += p.numel;
  return n;
}

std::vector<LanguageModel::ParameterView> LanguageModel::parameters() {
  std::vector<ParameterView> out;
  for (nn::Param& p : impl_->params.all()) out.push_back({p.name.c_str(), p.value, p.grad});
  return out;
}

}  // namespace qkv
