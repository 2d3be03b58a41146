// Seq2Seq: wiring of the encoder and decoder stacks, masks from padding, the generator, and greedy decoding.
// Legend: B batch, S source length, T target length, C d_model, V target vocabulary.
#include "qkv/seq2seq.h"

#include <algorithm>
#include <cmath>

#include "io/checkpoint.h"
#include "kernels/kernels.h"
#include "models/model_core.h"
#include "models/parameter_views.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/stack.h"
#include "qkv/config.h"

namespace qkv {
namespace {

const Seq2SeqConfig& validated(const Seq2SeqConfig& c) {
  check(c.src_vocab >= 1, "src_vocab = ", c.src_vocab, " is invalid: expected an integer >= 1");
  check(c.tgt_vocab >= 1, "tgt_vocab = ", c.tgt_vocab, " is invalid: expected an integer >= 1");
  models::check_stack(c);
  check(c.encoder_layers >= 1, "encoder_layers = ", c.encoder_layers, " is invalid: expected an integer >= 1");
  check(c.decoder_layers >= 1, "decoder_layers = ", c.decoder_layers, " is invalid: expected an integer >= 1");
  check(c.pad_id >= 0 && c.pad_id < std::min(c.src_vocab, c.tgt_vocab), "pad_id = ", c.pad_id,
        " is invalid: expected a token id in both vocabularies, [0, ", std::min(c.src_vocab, c.tgt_vocab), ")");
  check(c.label_smoothing >= 0.f && c.label_smoothing < 1.f, "label_smoothing = ", c.label_smoothing,
        " is invalid: expected 0 <= label_smoothing < 1");
  return c;
}

}  // namespace

struct Seq2Seq::Impl {
  Seq2SeqConfig config;
  int C, V;
  models::ModelCore core;
  nn::Embedding src_emb, tgt_emb;
  nn::EncoderStack encoder;
  nn::DecoderStack decoder;
  nn::Linear generator;

  int B_cap = 0, S_cap = 0, T_cap = 0;
  Span logits, losses, d_top, d_memory;  // logits become d logits in a training step
  std::vector<int32_t> src, tgt_in, tgt_out;
  std::vector<uint8_t> src_pad, tgt_pad;
  nn::Dropout drop;

  static nn::LayerOptions layer_options(const Seq2SeqConfig& c) {
    return {c.d_model, c.heads, c.d_ff > 0 ? c.d_ff : 4 * c.d_model, c.activation, c.norm, c.bias, 0.02f, 0.02f};
  }

  Impl(const Seq2SeqConfig& c, const OptimizerConfig& o)
      : config(validated(c)),
        C(c.d_model),
        V(c.tgt_vocab),
        core(o, c.seed, c.dropout),
        src_emb(core.params, "src_tok_emb.weight", "src_pos_emb.weight", c.src_vocab, c.context, C, c.scale_embedding,
                c.positions, 0.02f),
        tgt_emb(core.params, "tgt_tok_emb.weight", "tgt_pos_emb.weight", c.tgt_vocab, c.context, C, c.scale_embedding,
                c.positions, 0.02f),
        encoder(core.params, "encoder.", c.encoder_layers, layer_options(c), c.final_norm, "encoder.norm"),
        decoder(core.params, "decoder.", c.decoder_layers, layer_options(c), c.final_norm, "decoder.norm"),
        generator(core.params, "generator.weight", "generator.bias", C, c.tgt_vocab, 0.02f) {
    core.params.finalize(c.seed);
  }

  void ensure_capacity(int B, int S, int T) {
    if (B <= B_cap && S <= S_cap && T <= T_cap) return;
    B_cap = std::max(B, B_cap);
    S_cap = std::max(S, S_cap);
    T_cap = std::max(T, T_cap);
    core.ws.plan([&](Workspace& w) {
      const size_t rows = static_cast<size_t>(B_cap) * T_cap;
      encoder.plan(w, B_cap, S_cap);
      decoder.plan(w, B_cap, T_cap, S_cap);
      logits = w.take(rows * V);
      losses = w.take(rows);
      d_top = w.take(rows * C);
      d_memory = w.take(static_cast<size_t>(B_cap) * S_cap * C);
    });
  }

  void load(std::span<const int32_t> s, std::span<const int32_t> ti, const std::span<const int32_t>* to, int B, int S,
            int T) {
    models::check_dims(B, S, config.context, "src_len", "context");
    models::check_dims(B, T, config.context, "tgt_len", "context");
    models::check_shape(s, "src", B, S, "batch", "src_len");
    models::check_shape(ti, "tgt_in", B, T, "batch", "tgt_len");
    models::check_ids(s, "src", config.src_vocab);
    models::check_ids(ti, "tgt_in", V);
    if (to) {
      models::check_shape(*to, "tgt_out", B, T, "batch", "tgt_len");
      models::check_ids(*to, "tgt_out", V);
      tgt_out.assign(to->begin(), to->end());
    }
    ensure_capacity(B, S, T);
    src.assign(s.begin(), s.end());
    tgt_in.assign(ti.begin(), ti.end());
    models::pad_flags(src_pad, src, config.pad_id);
    models::pad_flags(tgt_pad, tgt_in, config.pad_id);
  }

  nn::AttentionMask src_mask() const { return {src_pad.data(), false}; }
  nn::AttentionMask tgt_mask() const { return {tgt_pad.data(), true}; }

  void encode(int B, int S) {
    src_emb.forward(encoder.input(), src.data(), B, S, drop);
    encoder.forward(src_mask(), B, S, drop);
  }

  void decode(int B, int S, int T) {
    tgt_emb.forward(decoder.input(), tgt_in.data(), B, T, drop);
    decoder.forward(encoder.output(), tgt_mask(), src_mask(), B, T, S, drop);
    generator.forward(logits, decoder.output(), B * T);
  }

  void forward(int B, int S, int T, bool train_pass) {
    drop = core.next_dropout(train_pass);
    encode(B, S);
    decode(B, S, T);
  }

  models::LossSum loss(int rows) {
    return models::cross_entropy(losses, logits, tgt_out.data(), rows, V, config.pad_id, config.label_smoothing);
  }

  // Adds weight * d(mean loss) to the gradients; returns the mean loss.
  float forward_backward(int B, int S, int T, float weight = 1.f) {
    forward(B, S, T, true);
    const int rows = B * T;
    // The loss and weight * d(mean loss)/d logits in one sweep, into the logits buffer.
    const models::LossSum l = models::cross_entropy_with_gradient(logits, losses, tgt_out.data(), weight, rows, V,
                                                                  config.pad_id, config.label_smoothing);
    check(l.count > 0, "tgt_out holds only pad_id = ", config.pad_id, ": expected at least one target token");
    const float mean = static_cast<float>(l.loss / static_cast<double>(l.count));
    check(std::isfinite(mean), "the loss is not finite (", mean, "); the weights are unchanged (try a lower lr)");
    const CSpan dlogits = logits;
    generator.backward(d_top, dlogits, decoder.output(), rows);
    const size_t nm = static_cast<size_t>(B) * S * C;
    std::fill_n(d_memory.begin(), nm, 0.f);
    const Span d_tgt = decoder.backward(d_top, d_memory, encoder.output(), tgt_mask(), src_mask(), B, T, S, drop);
    tgt_emb.backward(d_tgt, tgt_in.data(), B, T, drop);
    const Span d_src = encoder.backward(d_memory, src_mask(), B, S, drop);
    src_emb.backward(d_src, src.data(), B, S, drop);
    return mean;
  }
};

Seq2Seq::Seq2Seq(const Seq2SeqConfig& config, const OptimizerConfig& optimizer)
    : impl_(std::make_unique<Impl>(config, optimizer)) {}
Seq2Seq::~Seq2Seq() = default;

float Seq2Seq::forward_backward(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                                std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  impl_->core.params.zero_grad();
  return impl_->forward_backward(batch, src_len, tgt_len);
}

float Seq2Seq::train_step(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                          std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  return impl_->core.train_step([&] { return impl_->forward_backward(batch, src_len, tgt_len); });
}

Metrics Seq2Seq::evaluate(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                          std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  impl_->forward(batch, src_len, tgt_len, false);
  return impl_->loss(batch * tgt_len).metrics();
}

std::vector<float> Seq2Seq::logits(std::span<const int32_t> src, std::span<const int32_t> tgt_in, int batch,
                                   int src_len, int tgt_len) {
  impl_->load(src, tgt_in, nullptr, batch, src_len, tgt_len);
  impl_->forward(batch, src_len, tgt_len, false);
  const size_t n = static_cast<size_t>(batch) * tgt_len * impl_->V;
  return {impl_->logits.begin(), impl_->logits.begin() + static_cast<std::ptrdiff_t>(n)};
}

std::vector<int32_t> Seq2Seq::greedy(std::span<const int32_t> src, int batch, int src_len, int bos, int eos,
                                     int max_len) {
  Impl& m = *impl_;
  check(bos >= 0 && bos < m.V, "bos = ", bos, " is out of range: expected a token id in [0, ", m.V, ")");
  check(eos >= 0 && eos < m.V, "eos = ", eos, " is out of range: expected a token id in [0, ", m.V, ")");
  check(max_len >= 1 && max_len < m.config.context, "max_len = ", max_len,
        " is invalid: expected 1 <= max_len < context = ", m.config.context);
  // The decoder input grows one token per step: bos, then the tokens chosen so far.
  std::vector<int32_t> in(static_cast<size_t>(batch) * (max_len + 1), m.config.pad_id);
  for (int b = 0; b < batch; ++b) in[static_cast<size_t>(b) * (max_len + 1)] = bos;
  m.load(src, std::span<const int32_t>(in).first(static_cast<size_t>(batch)), nullptr, batch, src_len, 1);
  m.ensure_capacity(batch, src_len, max_len);
  m.drop = m.core.next_dropout(false);
  m.encode(batch, src_len);  // once: the memory does not change while decoding
  std::vector<int32_t> out(static_cast<size_t>(batch) * max_len, m.config.pad_id);
  std::vector<uint8_t> done(static_cast<size_t>(batch), 0);
  for (int t = 1; t <= max_len; ++t) {
    m.tgt_in.resize(static_cast<size_t>(batch) * t);
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < t; ++i)
        m.tgt_in[static_cast<size_t>(b) * t + i] = in[static_cast<size_t>(b) * (max_len + 1) + i];
    models::pad_flags(m.tgt_pad, m.tgt_in, -1);  // no padding inside the decoded prefix
    m.decode(batch, src_len, t);
    bool all_done = true;
    for (int b = 0; b < batch; ++b) {
      if (done[b]) continue;
      const float* z = m.logits.data() + (static_cast<size_t>(b) * t + t - 1) * m.V;
      const int32_t next = static_cast<int32_t>(std::max_element(z, z + m.V) - z);
      out[static_cast<size_t>(b) * max_len + t - 1] = next;
      in[static_cast<size_t>(b) * (max_len + 1) + t] = next;
      done[b] = next == eos;
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  return out;
}

std::vector<float> Seq2Seq::attention(AttentionKind kind, int layer) const {
  const Impl& m = *impl_;
  const int L = kind == AttentionKind::EncoderSelf ? m.encoder.size() : m.decoder.size();
  check(layer >= 0 && layer < L, "layer = ", layer, " is out of range: expected 0 <= layer < ", L);
  const nn::MultiHeadAttention& a = kind == AttentionKind::EncoderSelf   ? m.encoder.layer(layer).self_attention()
                                    : kind == AttentionKind::DecoderSelf ? m.decoder.layer(layer).self_attention()
                                                                         : m.decoder.layer(layer).cross_attention();
  std::vector<float> w = a.weights();
  check(!w.empty(), "attention: no forward pass has run yet");
  return w;
}

const Seq2SeqConfig& Seq2Seq::config() const { return impl_->config; }
const OptimizerConfig& Seq2Seq::optimizer() const { return impl_->core.optimizer.config(); }
void Seq2Seq::set_training(bool training) { impl_->core.training = training; }
void Seq2Seq::set_learning_rate(float lr) { impl_->core.optimizer.set_learning_rate(lr); }
size_t Seq2Seq::num_parameters() const { return impl_->core.num_parameters(); }
MemoryUsage Seq2Seq::memory() const { return impl_->core.memory(); }
int Seq2Seq::step() const { return impl_->core.optimizer.steps(); }
std::vector<ParameterView> Seq2Seq::parameters() { return models::views_of(impl_->core.params); }

std::vector<uint8_t> Seq2Seq::save(bool with_optimizer) {
  return io::save_checkpoint(impl_->core, "seq2seq", to_json(impl_->config), with_optimizer);
}
void Seq2Seq::save_file(const std::string& path, bool with_optimizer) {
  io::with_path(path, [&] { io::save_file(path, save(with_optimizer)); });
}
std::unique_ptr<Seq2Seq> Seq2Seq::load(std::span<const uint8_t> bytes) {
  const io::Checkpoint c = io::read_checkpoint(bytes, "seq2seq");
  auto m = std::make_unique<Seq2Seq>(seq2seq_config_from_json(c.config_json), c.optimizer);
  io::restore_checkpoint(m->impl_->core, c);
  return m;
}
std::unique_ptr<Seq2Seq> Seq2Seq::load_file(const std::string& path) {
  return io::with_path(path, [&] { return load(io::read_file(path)); });
}
void Seq2Seq::load_state(std::span<const uint8_t> bytes) {
  const io::Checkpoint c = io::read_checkpoint(bytes, "seq2seq");
  io::check_same_config(to_json(impl_->config), c.config_json);
  io::restore_checkpoint(impl_->core, c);
}

void Seq2Seq::load_weights(std::span<const uint8_t> bytes) { io::restore_weights(impl_->core, bytes); }

void Seq2Seq::zero_grad() { impl_->core.params.zero_grad(); }
float Seq2Seq::accumulate(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                          std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len, float weight) {
  check(std::isfinite(weight), "weight = ", weight, " is invalid: expected a finite number");
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  return impl_->forward_backward(batch, src_len, tgt_len, weight);
}
void Seq2Seq::apply_gradients() { impl_->core.optimizer.step(impl_->core.params); }

}  // namespace qkv
