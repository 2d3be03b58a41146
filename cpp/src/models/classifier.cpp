// Classifier: the encoder stack, pooling (first token or mean over non-pad tokens) and the head.
// Legend: B batch, T sequence, C d_model, K classes.
#include "qkv/classifier.h"

#include <algorithm>
#include <cmath>

#include "io/checkpoint.h"
#include "models/checkpoint_config.h"
#include "models/model_core.h"
#include "models/parameter_views.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/parameters.h"
#include "nn/stack.h"
#include "qkv/config.h"

namespace qkv {
namespace {

const ClassifierConfig& validated(const ClassifierConfig& c) {
  check(c.vocab_size >= 1, "vocab_size = ", c.vocab_size, " is invalid: expected an integer >= 1");
  models::check_stack(c);
  check(c.layers >= 1, "layers = ", c.layers, " is invalid: expected an integer >= 1");
  check(c.classes >= 2, "classes = ", c.classes, " is invalid: expected an integer >= 2");
  check(c.pad_id >= 0 && c.pad_id < c.vocab_size, "pad_id = ", c.pad_id, " is invalid: expected a token id in [0, ",
        c.vocab_size, ")");
  check(c.head != ClassifierHead::MLP || c.d_model >= 2, "d_model = ", c.d_model,
        " is too small for the MLP head: expected d_model >= 2 (its hidden width is d_model / 2)");
  return c;
}

}  // namespace

struct Classifier::Impl {
  ClassifierConfig config;
  int C, K, H2;  // H2: the MLP head's hidden width, C/2
  models::ModelCore core;
  nn::Embedding embedding;
  nn::EncoderStack encoder;
  std::unique_ptr<nn::Linear> fc1, fc2;  // MLP: classifier.0 and classifier.3; Linear: fc2 = classifier
  uint64_t head_stream;

  int B_cap = 0, T_cap = 0;
  Span pooled, hidden, hidden_act, logits, losses, d_pooled, d_hidden, d_top;  // logits become d logits
  std::span<int32_t> tokens_dev, labels_dev, best;                             // (B,T), (B), (B)
  std::span<uint8_t> pad;                                                      // (B,T) key_pad flags, device
  std::vector<int32_t> tokens, labels;                                         // host copies of the batch
  ops::Ids token_ids, label_ids;
  nn::Dropout drop;

  Impl(const ClassifierConfig& c, const OptimizerConfig& o, Device device)
      : config(validated(c)),
        C(c.d_model),
        K(c.classes),
        H2(c.d_model / 2),
        core(o, c.seed, c.dropout, ops::backend(device)),
        embedding(core.params, "tok_emb.weight", "pos_emb.weight", c.vocab_size, c.context, C, c.scale_embedding,
                  c.positions, 0.02f),
        encoder(core.params, "encoder.", c.layers,
                {C, c.heads, c.d_ff > 0 ? c.d_ff : 4 * C, c.activation, c.norm, c.bias, 0.02f, 0.02f, c.dropout > 0.f},
                c.final_norm, "encoder.norm"),
        head_stream(core.params.new_stream()) {
    if (c.head == ClassifierHead::MLP) {
      fc1 = std::make_unique<nn::Linear>(core.params, "classifier.0.weight", "classifier.0.bias", C, H2, 0.02f, "head");
      fc2 = std::make_unique<nn::Linear>(core.params, "classifier.3.weight", "classifier.3.bias", H2, K, 0.02f, "head");
    } else {
      fc2 = std::make_unique<nn::Linear>(core.params, "classifier.weight", "classifier.bias", C, K, 0.02f, "head");
    }
    core.params.finalize(c.seed);
  }

  ops::Backend& ops() { return core.ops(); }

  void ensure_capacity(int B, int T) {
    if (B <= B_cap && T <= T_cap) return;
    B_cap = std::max(B, B_cap);
    T_cap = std::max(T, T_cap);
    core.ws.plan([&](Workspace& w) {
      const size_t b = static_cast<size_t>(B_cap);
      encoder.plan(w, B_cap, T_cap, core.recomputes());
      embedding.plan(w, B_cap * T_cap);
      if (fc1) fc1->plan(w, B_cap);
      fc2->plan(w, B_cap);
      pooled = w.take(b * C);
      hidden = w.take(b * H2);
      hidden_act = w.take(b * H2);
      logits = w.take(b * K);
      losses = w.take(b);
      d_pooled = w.take(b * C);
      d_hidden = w.take(b * H2);
      d_top = w.take(b * T_cap * C);
      tokens_dev = w.take_ints(b * T_cap);
      labels_dev = w.take_ints(b);
      best = w.take_ints(b);
      pad = w.take_bytes(b * T_cap);
    });
  }

  void load(std::span<const int32_t> in, const std::span<const int32_t>* lb, int B, int T) {
    models::check_dims(B, T, config.context, "seq", "context");
    models::check_shape(in, "tokens", B, T, "batch", "seq");
    models::check_ids(in, "tokens", config.vocab_size);
    if (lb) {
      check(lb->size() == static_cast<size_t>(B), "labels has ", lb->size(), " entries: expected batch = ", B);
      for (size_t i = 0; i < lb->size(); ++i)
        check((*lb)[i] >= 0 && (*lb)[i] < K, "labels[", i, "] = ", (*lb)[i],
              " is out of range: expected a class in [0, ", K, ")");
    }
    ensure_capacity(B, T);
    if (lb) {
      labels.assign(lb->begin(), lb->end());
      label_ids = core.ids(labels_dev, labels);
    }
    tokens.assign(in.begin(), in.end());
    token_ids = core.ids(tokens_dev, tokens);
    core.pad_flags(pad, tokens, config.pad_id);
  }

  nn::AttentionMask mask() const { return {pad.data(), false}; }

  void forward(int B, int T, bool train_pass) {
    drop = core.next_dropout(train_pass);
    embedding.forward(encoder.input(), token_ids, B, T, drop);
    encoder.forward(mask(), B, T, drop);
    // pooled (B,C): the first token's row of each sequence, or the mean over its non-pad positions.
    const CSpan top = encoder.output();
    if (config.pooling == Pooling::First)
      ops().copy_rows(pooled.data(), C, top.data(), T * C, B, C);
    else
      ops().mean_pool_forward(pooled.first(static_cast<size_t>(B) * C), top, pad.data(), B, T, C);
    if (fc1) {
      const size_t n = static_cast<size_t>(B) * H2;
      fc1->forward(hidden_act, hidden, pooled, B, ops::Act::ReLU, drop);
      if (drop.active())
        ops().dropout_forward(hidden_act.first(n), hidden_act.first(n), drop.p, drop.seed_for(head_stream));
      fc2->forward(logits, hidden_act, B, drop);
    } else {
      fc2->forward(logits, pooled, B, drop);
    }
  }

  models::LossSum loss(int B) {
    return models::cross_entropy(core, losses, best, logits, label_ids, B, K, INT32_MIN, 0.f);
  }

  // The forward and the loss with weight * d(mean loss)/d logits in one sweep, into the logits buffer.
  models::ModelCore::PendingLoss forward_loss(int B, int T, float weight) {
    forward(B, T, true);
    return models::cross_entropy_with_gradient(core, logits, losses, label_ids, weight, B, K, INT32_MIN, 0.f);
  }

  // Given d logits in the logits buffer, adds to the parameters' gradients.
  void backward(int B, int T) {
    const CSpan dlogits = logits;
    if (fc1) {
      const size_t n = static_cast<size_t>(B) * H2;
      fc2->backward(d_hidden, dlogits, hidden_act, B);
      if (drop.active())
        ops().dropout_backward(d_hidden.first(n), d_hidden.first(n), drop.p, drop.seed_for(head_stream));
      // ReLU's derivative from the sign of its output (hidden is scratch under ReLU: ops.h's linear_forward);
      // dropout's zeros carry no gradient either way.
      fc1->backward(d_pooled, d_hidden, hidden_act, pooled, B, ops::Act::ReLU);
    } else {
      fc2->backward(d_pooled, dlogits, pooled, B);
    }
    // Pooling's backward: the first token gets all of d pooled, or each non-pad token an equal share.
    const size_t n_top = static_cast<size_t>(B) * T * C;
    if (config.pooling == Pooling::First) {
      ops().fill(d_top.first(n_top), 0.f);
      ops().copy_rows(d_top.data(), T * C, d_pooled.data(), C, B, C);
    } else {
      ops().mean_pool_backward(d_top.first(n_top), d_pooled, pad.data(), B, T, C);
    }
    const Span d_emb = encoder.backward(d_top, mask(), B, T, drop);
    embedding.backward(d_emb, token_ids, B, T, drop);
  }

  // Adds weight * d(mean loss) to the gradients; returns the mean loss.
  float forward_backward(int B, int T, float weight = 1.f) {
    return core.accumulate([&] { return forward_loss(B, T, weight); }, [&] { backward(B, T); });
  }
};

Classifier::Classifier(const ClassifierConfig& config, const OptimizerConfig& optimizer, Device device)
    : impl_(std::make_unique<Impl>(config, optimizer, device)) {}
Classifier::~Classifier() = default;

float Classifier::forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch,
                                   int seq) {
  impl_->load(tokens, &labels, batch, seq);
  impl_->core.zero_grad();
  return impl_->forward_backward(batch, seq);
}

StepLoss Classifier::queue_train_step(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch,
                                      int seq) {
  impl_->load(tokens, &labels, batch, seq);
  Impl& m = *impl_;
  return m.core.queue_train_step(
      models::shape_key({batch, seq}), [&] { return m.forward_loss(batch, seq, 1.f); },
      [&] { m.backward(batch, seq); });
}

float Classifier::train_step(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq) {
  impl_->load(tokens, &labels, batch, seq);
  Impl& m = *impl_;
  return m.core.train_step(
      models::shape_key({batch, seq}), [&] { return m.forward_loss(batch, seq, 1.f); },
      [&] { m.backward(batch, seq); });
}

Metrics Classifier::evaluate(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq) {
  impl_->load(tokens, &labels, batch, seq);
  impl_->forward(batch, seq, false);
  return impl_->loss(batch).metrics();
}

std::vector<float> Classifier::logits(std::span<const int32_t> tokens, int batch, int seq) {
  impl_->load(tokens, nullptr, batch, seq);
  impl_->forward(batch, seq, false);
  std::vector<float> out(static_cast<size_t>(batch) * impl_->K);
  impl_->ops().download(out.data(), impl_->logits.data(), out.size() * sizeof(float));
  models::check_finite_logits(out);
  return out;
}

std::vector<float> Classifier::attention(int layer) const {
  const Impl& m = *impl_;
  check(layer >= 0 && layer < m.encoder.size(), "layer = ", layer, " is out of range: expected 0 <= layer < ",
        m.encoder.size());
  // Recomputing, the layer's forward may run again (nn/stack.h): the arena is scratch, so impl_ is not const here.
  std::vector<float> w = impl_->encoder.attention_weights(layer);
  check(!w.empty(),
        "attention: no weights to show: no forward pass has run yet, or a training step of a model that recomputes its "
        "activations (set_recompute; on with LoRA adapters) ran since; run logits() or evaluate() first");
  return w;
}

const ClassifierConfig& Classifier::config() const { return impl_->config; }

// A qkv checkpoint streams into a model built without initial values or training state (ForLoading): every
// weight is overwritten, and gradients and moments wait for the first training call.
std::unique_ptr<Classifier> Classifier::load(std::span<const uint8_t> bytes) {
  std::unique_ptr<Classifier> m;
  const auto make = [&](const io::Checkpoint& c) -> models::ModelCore& {
    const nn::Parameters::ForLoading loading(&c.formats);  // a quantized checkpoint's tensors packed from the start
    m = std::make_unique<Classifier>(classifier_config_from_json(c.config_json), c.optimizer);
    return m->impl_->core;
  };
  if (io::load_bytes_streaming(bytes, "classifier", make)) return m;
  // A foreign state dict (io/import.h) is mapped as a whole.
  const io::Checkpoint c = io::read_checkpoint(bytes, "classifier");
  m = std::make_unique<Classifier>(models::checkpoint_config(c, "classifier", classifier_config_from_json),
                                   c.optimizer);
  io::restore_checkpoint(m->impl_->core, c);
  return m;
}
std::unique_ptr<Classifier> Classifier::load_file(const std::string& path) {
  std::unique_ptr<Classifier> m;
  const auto make = [&](const io::Checkpoint& c) -> models::ModelCore& {
    const nn::Parameters::ForLoading loading(&c.formats);  // a quantized checkpoint's tensors packed from the start
    m = std::make_unique<Classifier>(classifier_config_from_json(c.config_json), c.optimizer);
    return m->impl_->core;
  };
  if (io::load_file_streaming(path, "classifier", make)) return m;
  return io::with_path(path, [&] { return load(io::read_file(path)); });
}

float Classifier::accumulate(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq,
                             float weight) {
  check(std::isfinite(weight), "weight = ", weight, " is invalid: expected a finite number");
  impl_->load(tokens, &labels, batch, seq);
  return impl_->forward_backward(batch, seq, weight);
}

models::ModelCore& Classifier::core() { return impl_->core; }
const char* Classifier::kind() const { return "classifier"; }
std::string Classifier::config_json() const { return to_json(impl_->config); }
void Classifier::reset(bool moved) {
  if (moved) impl_->B_cap = impl_->T_cap = 0;
}

}  // namespace qkv
