// Seq2Seq: wiring of the encoder and decoder stacks, masks from padding, the generator, and greedy decoding.
// Legend: B batch, S source length, T target length, C d_model, V target vocabulary.
#include "qkv/seq2seq.h"

#include <algorithm>
#include <cmath>

#include "infer/beam_search.h"
#include "infer/kv_cache.h"
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
  Span beam_memory;                      // (B_cap,S_cap,C): generation's encoder output, one row per beam
  std::span<int32_t> src_dev, tgt_in_dev, tgt_out_dev, best;  // device ids (B,S), (B,T), (B,T); argmax (B,T)
  std::span<uint8_t> src_pad, tgt_pad, beam_pad;              // device key_pad flags (B,S), (B,T), (B,S)
  std::vector<int32_t> src, tgt_in, tgt_out;                  // host copies of the batch
  ops::Ids src_ids, tgt_in_ids, tgt_out_ids;
  nn::Dropout drop;
  infer::KvCaches self_caches, cross_caches;  // generation's, one per decoder layer each

  static nn::LayerOptions layer_options(const Seq2SeqConfig& c) {
    return {c.d_model, c.heads,        c.d_ff > 0 ? c.d_ff : 4 * c.d_model, c.activation, c.norm, c.bias, 0.02f,
            0.02f,     c.dropout > 0.f};
  }

  Impl(const Seq2SeqConfig& c, const OptimizerConfig& o, Device device)
      : config(validated(c)),
        C(c.d_model),
        V(c.tgt_vocab),
        core(o, c.seed, c.dropout, ops::backend(device)),
        src_emb(core.params, "src_tok_emb.weight", "src_pos_emb.weight", c.src_vocab, c.context, C, c.scale_embedding,
                c.positions, 0.02f),
        tgt_emb(core.params, "tgt_tok_emb.weight", "tgt_pos_emb.weight", c.tgt_vocab, c.context, C, c.scale_embedding,
                c.positions, 0.02f),
        encoder(core.params, "encoder.", c.encoder_layers, layer_options(c), c.final_norm, "encoder.norm"),
        decoder(core.params, "decoder.", c.decoder_layers, layer_options(c), c.final_norm, "decoder.norm"),
        generator(core.params, "generator.weight", "generator.bias", C, c.tgt_vocab, 0.02f, "head") {
    core.params.finalize(c.seed);
  }

  ops::Backend& ops() { return core.ops(); }

  void ensure_capacity(int B, int S, int T) {
    if (B <= B_cap && S <= S_cap && T <= T_cap) return;
    B_cap = std::max(B, B_cap);
    S_cap = std::max(S, S_cap);
    T_cap = std::max(T, T_cap);
    core.ws.plan([&](Workspace& w) {
      const size_t rows = static_cast<size_t>(B_cap) * T_cap;
      encoder.plan(w, B_cap, S_cap, core.recomputes());
      decoder.plan(w, B_cap, T_cap, S_cap);
      generator.plan(w, static_cast<int>(rows));
      src_emb.plan(w, B_cap * S_cap);
      tgt_emb.plan(w, static_cast<int>(rows));
      const size_t src_rows = static_cast<size_t>(B_cap) * S_cap;
      logits = w.take(rows * V);
      losses = w.take(rows);
      d_top = w.take(rows * C);
      d_memory = w.take(src_rows * C);
      beam_memory = w.take(src_rows * C);
      src_dev = w.take_ints(src_rows);
      tgt_in_dev = w.take_ints(rows);
      tgt_out_dev = w.take_ints(rows);
      best = w.take_ints(rows);
      src_pad = w.take_bytes(src_rows);
      tgt_pad = w.take_bytes(rows);
      beam_pad = w.take_bytes(src_rows);
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
    }
    ensure_capacity(B, S, T);
    if (to) {
      tgt_out.assign(to->begin(), to->end());
      tgt_out_ids = core.ids(tgt_out_dev, tgt_out);
    }
    src.assign(s.begin(), s.end());
    tgt_in.assign(ti.begin(), ti.end());
    src_ids = core.ids(src_dev, src);
    tgt_in_ids = core.ids(tgt_in_dev, tgt_in);
    core.pad_flags(src_pad, src, config.pad_id);
    core.pad_flags(tgt_pad, tgt_in, config.pad_id);
  }

  nn::AttentionMask src_mask() const { return {src_pad.data(), false}; }
  nn::AttentionMask tgt_mask() const { return {tgt_pad.data(), true}; }

  void encode(int B, int S) {
    src_emb.forward(encoder.input(), src_ids, B, S, drop);
    encoder.forward(src_mask(), B, S, drop);
  }

  void decode(int B, int S, int T) {
    tgt_emb.forward(decoder.input(), tgt_in_ids, B, T, drop);
    decoder.forward(encoder.output(), tgt_mask(), src_mask(), B, T, S, drop);
    generator.forward(logits, decoder.output(), B * T, drop);
  }

  void forward(int B, int S, int T, bool train_pass) {
    drop = core.next_dropout(train_pass);
    encode(B, S);
    decode(B, S, T);
  }

  models::LossSum loss(int rows) {
    return models::cross_entropy(core, losses, best, logits, tgt_out_ids, rows, V, config.pad_id,
                                 config.label_smoothing);
  }

  // The forward and the loss with weight * d(mean loss)/d logits in one sweep, into the logits buffer.
  models::ModelCore::PendingLoss forward_loss(int B, int S, int T, float weight) {
    forward(B, S, T, true);
    const models::ModelCore::PendingLoss l = models::cross_entropy_with_gradient(
        core, logits, losses, tgt_out_ids, weight, B * T, V, config.pad_id, config.label_smoothing);
    check(l.count > 0, "tgt_out holds only pad_id = ", config.pad_id, ": expected at least one target token");
    return l;
  }

  // Given d logits in the logits buffer, adds to the parameters' gradients.
  void backward(int B, int S, int T) {
    const int rows = B * T;
    const CSpan dlogits = logits;
    generator.backward(d_top, dlogits, decoder.output(), rows);
    const size_t nm = static_cast<size_t>(B) * S * C;
    ops().fill(d_memory.first(nm), 0.f);
    const Span d_tgt = decoder.backward(d_top, d_memory, encoder.output(), tgt_mask(), src_mask(), B, T, S, drop);
    tgt_emb.backward(d_tgt, tgt_in_ids, B, T, drop);
    const Span d_src = encoder.backward(d_memory, src_mask(), B, S, drop);
    src_emb.backward(d_src, src_ids, B, S, drop);
  }

  // Adds weight * d(mean loss) to the gradients; returns the mean loss.
  float forward_backward(int B, int S, int T, float weight = 1.f) {
    return core.accumulate([&] { return forward_loss(B, S, T, weight); }, [&] { backward(B, S, T); });
  }
};

Seq2Seq::Seq2Seq(const Seq2SeqConfig& config, const OptimizerConfig& optimizer, Device device)
    : impl_(std::make_unique<Impl>(config, optimizer, device)) {}
Seq2Seq::~Seq2Seq() = default;

float Seq2Seq::forward_backward(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                                std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  impl_->core.zero_grad();
  return impl_->forward_backward(batch, src_len, tgt_len);
}

StepLoss Seq2Seq::queue_train_step(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                                   std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  Impl& m = *impl_;
  return m.core.queue_train_step(
      models::shape_key({batch, src_len, tgt_len}), [&] { return m.forward_loss(batch, src_len, tgt_len, 1.f); },
      [&] { m.backward(batch, src_len, tgt_len); });
}

float Seq2Seq::train_step(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                          std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  Impl& m = *impl_;
  return m.core.train_step(
      models::shape_key({batch, src_len, tgt_len}), [&] { return m.forward_loss(batch, src_len, tgt_len, 1.f); },
      [&] { m.backward(batch, src_len, tgt_len); });
}

Metrics Seq2Seq::evaluate(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                          std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len) {
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  impl_->forward(batch, src_len, tgt_len, false);
  const Metrics metrics = impl_->loss(batch * tgt_len).metrics();
  // As train_step: a batch of padding has no loss (0 and a perplexity of 1 would read as a perfect model).
  check(metrics.count > 0, "tgt_out holds only pad_id = ", impl_->config.pad_id,
        ": expected at least one target token");
  return metrics;
}

std::vector<float> Seq2Seq::logits(std::span<const int32_t> src, std::span<const int32_t> tgt_in, int batch,
                                   int src_len, int tgt_len) {
  impl_->load(src, tgt_in, nullptr, batch, src_len, tgt_len);
  impl_->forward(batch, src_len, tgt_len, false);
  const size_t n = static_cast<size_t>(batch) * tgt_len * impl_->V;
  std::vector<float> out(n);
  impl_->ops().download(out.data(), impl_->logits.data(), n * sizeof(float));
  models::check_finite_logits(out);
  return out;
}

std::vector<int32_t> Seq2Seq::greedy(std::span<const int32_t> src, int batch, int src_len, int bos, int eos,
                                     int max_len) {
  DecodeOptions o;
  o.bos = bos;
  o.eos = eos;
  o.max_len = max_len;
  return generate(src, batch, src_len, o).tokens;
}

Decoded Seq2Seq::generate(std::span<const int32_t> src, int batch, int src_len, const DecodeOptions& o) {
  Impl& m = *impl_;
  check(o.bos >= 0 && o.bos < m.V, "bos = ", o.bos, " is out of range: expected a token id in [0, ", m.V, ")");
  check(o.eos >= 0 && o.eos < m.V, "eos = ", o.eos, " is out of range: expected a token id in [0, ", m.V, ")");
  // Training masks pad_id in tgt_in (a bos that is pad_id is attended to by nothing there) and ignores it in tgt_out
  // (an eos that is pad_id was never learned): generation with either would not be the model that trained.
  check(o.bos != m.config.pad_id, "bos = ", o.bos,
        " is pad_id: expected a token id other than pad_id = ", m.config.pad_id, " (training masks it)");
  check(o.eos != m.config.pad_id, "eos = ", o.eos,
        " is pad_id: expected a token id other than pad_id = ", m.config.pad_id, " (training ignores it as a target)");
  check(o.max_len >= 1 && o.max_len < m.config.context, "max_len = ", o.max_len,
        " is invalid: expected 1 <= max_len < context = ", m.config.context);
  check(o.beam_width >= 1 && o.beam_width <= 64, "beam_width = ", o.beam_width,
        " is invalid: expected an integer in [1, 64]");
  check(std::isfinite(o.length_penalty) && o.length_penalty >= 0.f, "length_penalty = ", o.length_penalty,
        " is invalid: expected a finite number >= 0");
  models::check_dims(batch, src_len, m.config.context, "src_len", "context");
  models::check_shape(src, "src", batch, src_len, "batch", "src_len");
  models::check_ids(src, "src", m.config.src_vocab);
  const int W = o.beam_width, R = batch * W, S = src_len, T_max = o.max_len, C = m.C, V = m.V;
  const int L = m.decoder.size();
  m.ensure_capacity(R, S, T_max);

  // The encoder runs once, on the batch rows; each beam row then reads its source row's memory and padding.
  m.src.assign(src.begin(), src.end());
  m.src_ids = m.core.ids(m.src_dev, m.src);
  m.core.pad_flags(m.src_pad, m.src, m.config.pad_id);
  m.drop = m.core.next_dropout(false);
  m.encode(batch, S);
  std::vector<int32_t> beam_src(static_cast<size_t>(R) * S);  // row r: source row r / W, for its padding flags
  for (int r = 0; r < R; ++r) {
    m.ops().copy_rows(m.beam_memory.data() + static_cast<size_t>(r) * S * C, C,
                      m.encoder.output().data() + static_cast<size_t>(r / W) * S * C, C, S, C);
    std::copy_n(m.src.begin() + static_cast<std::ptrdiff_t>(r / W) * S, S,
                beam_src.begin() + static_cast<std::ptrdiff_t>(r) * S);
  }
  const CSpan memory = m.beam_memory.first(static_cast<size_t>(R) * S * C);
  const nn::AttentionMask self_mask{nullptr, true},
      memory_mask{m.core.pad_flags(m.beam_pad, beam_src, m.config.pad_id), false};

  // The decoder as beam search steps it. With the caches: the new token of each row, one position. Without:
  // the whole prefix (bos and the tokens so far) of each row, and the last position's logits. Either way the
  // (R,V) logits of the step come to the host, where beam search ranks the extensions.
  std::vector<int32_t> prefix, grown;  // (R, t) without the caches
  std::vector<float>& last = m.core.host_floats;
  if (o.use_cache) {
    m.self_caches.reset(m.ops(), L, R, T_max, C);
    m.cross_caches.reset(m.ops(), L, R, S, C, true);
  }
  const infer::BeamStep step = [&](std::span<const int32_t> parents, std::span<const int32_t> tokens) -> const float* {
    last.resize(static_cast<size_t>(R) * V);
    if (o.use_cache) {
      m.self_caches.reorder(parents);
      const ops::Ids ids = m.core.ids(m.tgt_in_dev, tokens);
      m.tgt_emb.forward(m.decoder.input(), ids, R, 1, m.drop, m.self_caches.length());
      m.decoder.forward(memory, self_mask, memory_mask, R, 1, S, m.drop, m.self_caches.layers(),
                        m.cross_caches.layers());
      m.generator.forward(m.logits, m.decoder.output(), R, m.drop);
      m.ops().download(last.data(), m.logits.data(), last.size() * sizeof(float));
      return last.data();
    }
    const int t = static_cast<int>(prefix.size()) / R + 1;
    grown.resize(static_cast<size_t>(R) * t);
    for (int r = 0; r < R; ++r) {
      const auto from = prefix.begin() + static_cast<std::ptrdiff_t>(parents[static_cast<size_t>(r)]) * (t - 1);
      std::copy(from, from + (t - 1), grown.begin() + static_cast<std::ptrdiff_t>(r) * t);
      grown[static_cast<size_t>(r) * t + t - 1] = tokens[static_cast<size_t>(r)];
    }
    prefix.swap(grown);
    const ops::Ids ids = m.core.ids(m.tgt_in_dev, prefix);
    m.tgt_emb.forward(m.decoder.input(), ids, R, t, m.drop);
    m.decoder.forward(memory, self_mask, memory_mask, R, t, S, m.drop);
    m.generator.forward(m.logits, m.decoder.output(), R * t, m.drop);
    for (int r = 0; r < R; ++r)
      m.ops().download(last.data() + static_cast<size_t>(r) * V,
                       m.logits.data() + (static_cast<size_t>(r) * t + t - 1) * V,
                       static_cast<size_t>(V) * sizeof(float));
    return last.data();
  };
  infer::BeamSearchOptions bo;
  bo.batch = batch;
  bo.width = W;
  bo.vocab = V;
  bo.max_len = T_max;
  bo.bos = o.bos;
  bo.eos = o.eos;
  bo.length_penalty = o.length_penalty;
  const std::vector<infer::Hypothesis> best = infer::beam_search(bo, step);

  Decoded d;
  d.tokens.assign(static_cast<size_t>(batch) * T_max, m.config.pad_id);
  for (int b = 0; b < batch; ++b) {
    const infer::Hypothesis& h = best[static_cast<size_t>(b)];
    std::copy(h.tokens.begin(), h.tokens.end(), d.tokens.begin() + static_cast<std::ptrdiff_t>(b) * T_max);
    d.scores.push_back(static_cast<float>(h.score));
    d.lengths.push_back(static_cast<int32_t>(h.tokens.size()));
  }
  return d;
}

std::vector<float> Seq2Seq::attention(AttentionKind kind, int layer) const {
  const Impl& m = *impl_;
  const int L = kind == AttentionKind::EncoderSelf ? m.encoder.size() : m.decoder.size();
  check(layer >= 0 && layer < L, "layer = ", layer, " is out of range: expected 0 <= layer < ", L);
  // The encoder's, when it recomputes, may run the layer's forward again (nn/stack.h): impl_ is not const.
  std::vector<float> w = kind == AttentionKind::EncoderSelf   ? impl_->encoder.attention_weights(layer)
                         : kind == AttentionKind::DecoderSelf ? m.decoder.layer(layer).self_attention().weights()
                                                              : m.decoder.layer(layer).cross_attention().weights();
  check(!w.empty(), "attention: no weights to show: no full forward pass has run since the model was made, loaded or ",
        "last generated (generation keeps keys and values in its KV caches), or, for the encoder's, since a training ",
        "step of a model that recomputes its activations (set_recompute; on with LoRA adapters); run logits() or ",
        "evaluate() first");
  return w;
}

const Seq2SeqConfig& Seq2Seq::config() const { return impl_->config; }

// A qkv checkpoint streams into a model built without initial values or training state (ForLoading): every
// weight is overwritten, and gradients and moments wait for the first training call.
std::unique_ptr<Seq2Seq> Seq2Seq::load(std::span<const uint8_t> bytes) {
  std::unique_ptr<Seq2Seq> m;
  const auto make = [&](const io::Checkpoint& c) -> models::ModelCore& {
    const nn::Parameters::ForLoading loading(&c.formats);  // a quantized checkpoint's tensors packed from the start
    m = std::make_unique<Seq2Seq>(seq2seq_config_from_json(c.config_json), c.optimizer);
    return m->impl_->core;
  };
  if (io::load_bytes_streaming(bytes, "seq2seq", make)) return m;
  // A foreign state dict (io/import.h) is mapped as a whole.
  const io::Checkpoint c = io::read_checkpoint(bytes, "seq2seq");
  m = std::make_unique<Seq2Seq>(models::checkpoint_config(c, "seq2seq", seq2seq_config_from_json), c.optimizer);
  io::restore_checkpoint(m->impl_->core, c);
  return m;
}
std::unique_ptr<Seq2Seq> Seq2Seq::load_file(const std::string& path) {
  std::unique_ptr<Seq2Seq> m;
  const auto make = [&](const io::Checkpoint& c) -> models::ModelCore& {
    const nn::Parameters::ForLoading loading(&c.formats);  // a quantized checkpoint's tensors packed from the start
    m = std::make_unique<Seq2Seq>(seq2seq_config_from_json(c.config_json), c.optimizer);
    return m->impl_->core;
  };
  if (io::load_file_streaming(path, "seq2seq", make)) return m;
  return io::with_path(path, [&] { return load(io::read_file(path)); });
}

float Seq2Seq::accumulate(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                          std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len, float weight) {
  check(std::isfinite(weight), "weight = ", weight, " is invalid: expected a finite number");
  impl_->load(src, tgt_in, &tgt_out, batch, src_len, tgt_len);
  return impl_->forward_backward(batch, src_len, tgt_len, weight);
}

models::ModelCore& Seq2Seq::core() { return impl_->core; }
const char* Seq2Seq::kind() const { return "seq2seq"; }
std::string Seq2Seq::config_json() const { return to_json(impl_->config); }
void Seq2Seq::reset(bool moved) {
  if (moved) impl_->B_cap = impl_->S_cap = impl_->T_cap = 0;
}

}  // namespace qkv
