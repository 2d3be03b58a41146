// LanguageModel: wiring of the layers, input validation, the training step and sampling.
// Legend: B batch, T sequence, C d_model, V vocabulary, L layers.
#include "qkv/language_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "infer/kv_cache.h"
#include "io/checkpoint.h"
#include "models/checkpoint_config.h"
#include "models/head_chunk.h"
#include "models/model_core.h"
#include "models/parameter_views.h"
#include "nn/embedding.h"
#include "nn/parameters.h"
#include "nn/stack.h"
#include "nn/weight_product.h"
#include "qkv/config.h"
#include "runtime/random.h"

namespace qkv {

namespace models {
namespace {
std::atomic<int> chunk_rows{0};
}
int head_chunk_rows_for(int V, size_t held_floats) {
  check(V >= 1, "V = ", V, " is invalid: expected an integer >= 1");
  const size_t per_chunk = static_cast<size_t>(V) * kHeadChunkRows;
  const size_t budget = std::max(kHeadChunkLogits, held_floats / kHeadChunkShare);
  return kHeadChunkRows *
         static_cast<int>(std::clamp<size_t>(budget / per_chunk, 1, std::numeric_limits<int>::max() / kHeadChunkRows));
}
int head_chunk_rows() { return chunk_rows.load(); }
void set_head_chunk_rows(int rows) {
  check(rows >= 0, "rows = ", rows, " is invalid: expected 0 (chunks sized by the vocabulary) or an integer >= 1");
  chunk_rows.store(rows);
}
}  // namespace models

namespace {

const LanguageModelConfig& validated(const LanguageModelConfig& c) {
  check(c.vocab_size >= 1, "vocab_size = ", c.vocab_size, " is invalid: expected an integer >= 1");
  models::check_stack(c);
  check(c.layers >= 1, "layers = ", c.layers, " is invalid: expected an integer >= 1");
  // Keep every buffer index within 32-bit ints in the kernels.
  check(static_cast<int64_t>(c.vocab_size) * c.d_model < (int64_t{1} << 31),
        "vocab_size * d_model = ", static_cast<int64_t>(c.vocab_size) * c.d_model, " is too large: expected < 2^31");
  return c;
}

}  // namespace

struct LanguageModel::Impl {
  LanguageModelConfig config;
  int C, V, L, F;
  models::ModelCore core;
  nn::Embedding embedding;
  nn::EncoderStack stack;             // causal self-attention layers "layers.N." and the final "norm"
  nn::Param* lm_head = nullptr;       // untied head (V, C)
  nn::LoraSite* head_site = nullptr;  // LoRA's "head" target: the head product (tied or not)
  Span dequant;                       // a frozen quantized head's rows for d top (nn/weight_product.h)

  // The workspace's model-level buffers, planned for (B_cap, T_cap), the attention's scratch also for K_cap cached keys
  // (generation's KV caches). A training step runs the head and the loss
  // over chunks of head_rows rows (head_loss), so logits holds (head_rows + kTailRows, V); the paths that return or
  // read every row's logits (evaluate, logits(), uncached generation) ask for the whole (B_cap * T_cap, V) once, which
  // training then chunks as well; cached generation reads only each sequence's last position's (B_cap, V).
  enum class LogitRows { Last, Chunk, Whole };  // ordered: each holds the rows the ones before it need
  int B_cap = 0, T_cap = 0, K_cap = 0, head_rows = 0;
  const int chunk_setting = models::head_chunk_rows();  // models/head_chunk.h, when the model was made (0: by V)
  LogitRows logit_rows = LogitRows::Last;
  Span logits, losses, d_top;                        // logits become d logits in a training step
  std::span<int32_t> tokens_dev, targets_dev, best;  // device ids of the batch (B,T); argmax (B,T)
  std::vector<int32_t> tokens, targets;              // host copies of the current batch, (B,T)
  ops::Ids token_ids, target_ids;                    // the batch as the ops take it
  nn::Dropout drop;                                  // of the last forward
  infer::KvCaches caches;                            // generation's, one per layer
  // Which Generation's keys and values the caches hold (0: none, or stale since the model ran or loaded
  // weights): a Generation that finds it is not the owner rebuilds them before its next token.
  uint64_t caches_owner = 0, generations = 0;

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2L)).
  Impl(const LanguageModelConfig& c, const OptimizerConfig& o, Device device)
      : config(validated(c)),
        C(c.d_model),
        V(c.vocab_size),
        L(c.layers),
        F(c.d_ff > 0 ? c.d_ff : 4 * c.d_model),
        core(o, c.seed, c.dropout, ops::backend(device)),
        embedding(core.params, "tok_emb.weight", "pos_emb.weight", V, c.context, C, c.scale_embedding, c.positions,
                  0.02f),
        stack(core.params, "", L,
              {C, c.heads, F, c.activation, c.norm, c.bias, 0.02f, 0.02f / std::sqrt(2.f * c.layers), c.dropout > 0.f},
              c.final_norm, "norm") {
    if (!c.tie_head) {
      lm_head = &core.params.add("lm_head.weight", {V, C}, nn::Init::Normal, 0.02f);
      lm_head->matrix = true;
    }
    // Tied, the adapter adapts the head product only (not the embedding lookup); its name is lm_head's either way.
    head_site = &core.params.add_lora_site("lm_head", "head", C, V, lm_head ? *lm_head : embedding.token_weight());
    core.params.finalize(c.seed);
  }

  ops::Backend& ops() { return core.ops(); }

  // The head (V, C): its own, or tied, the token embedding (packed with it when the model is quantized with it).
  const nn::Param& head() const { return lm_head ? *lm_head : embedding.token_weight(); }
  const float* head_weight() const { return head().value.data(); }
  float* head_grad() { return lm_head ? lm_head->grad.data() : embedding.token_weight().grad.data(); }
  nn::LoraAdapter* head_adapter() const { return head_site->adapter; }

  // Rows of a training step's head chunk for `rows` rows. A head adapter with dropout draws its mask over its whole
  // input at once (nn/lora.h), so it keeps one chunk: its masks stay those of the whole pass. A packed (quantized)
  // head is dequantized whole once per chunk in the forward and again in the backward (gemm_quant's panels,
  // weight_product_dx): its chunks are twice as long, halving that work (GPT-2's q4 head, 2 threads: about 20 ms a
  // dequantization; a q4 base's LoRA step was 14% slower at 64 rows than at 128).
  // held_floats: what the stack holds in the workspace (models/head_chunk.h).
  int head_chunk(int rows, size_t held_floats) const {
    const nn::LoraAdapter* a = head_adapter();
    if (a && a->p > 0.f) return rows;
    const int base = chunk_setting > 0 ? chunk_setting : models::head_chunk_rows_for(V, held_floats);
    return std::min(rows, head().is_packed() ? 2 * base : base);
  }
  // A last chunk of 1 or 2 rows joins the one before it: the CPU gemm takes products of one or two rows through
  // its row kernels (kernels/cpu/gemm.cpp), whose sums run in another order than its tiles', and each row's logits
  // and d top must be those of the whole product.
  static constexpr int kTailRows = 2;
  // Vocabulary rows per head product in a training step (head_loss): a multiple of the gemm's K block (256).
  static constexpr int kVocabBlock = 2048;
  // Rows of the chunk that begins at row r0 of rows.
  int chunk_at(int r0, int rows) const {
    const int left = rows - r0;
    return left - head_rows <= kTailRows ? left : head_rows;
  }

  // cached_keys: the capacity of the KV caches the stack's forward will be given (generation's), 0 for none.
  void ensure_capacity(int B, int T, LogitRows need, int cached_keys = 0) {
    if (B <= B_cap && T <= T_cap && cached_keys <= K_cap && need <= logit_rows) return;
    B_cap = std::max(B, B_cap);
    T_cap = std::max(T, T_cap);
    K_cap = std::max(cached_keys, K_cap);
    logit_rows = std::max(logit_rows, need);
    core.ws.plan([&](Workspace& w) {
      const size_t rows = static_cast<size_t>(B_cap) * T_cap;
      stack.plan(w, B_cap, T_cap, core.recomputes(), K_cap);
      head_rows = head_chunk(static_cast<int>(rows), w.taken_floats());
      embedding.plan(w, static_cast<int>(rows));
      // A chunk holds at least the last rows too (B_cap, when more than a chunk): a model that trained, then
      // generates a large batch with the cache, plans nothing new (LogitRows::Last <= Chunk).
      const size_t logit_count =
          logit_rows == LogitRows::Whole ? rows
          : logit_rows == LogitRows::Chunk
              ? std::max(std::min(rows, static_cast<size_t>(head_rows) + kTailRows), static_cast<size_t>(B_cap))
              : static_cast<size_t>(B_cap);
      logits = w.take(logit_count * V);
      losses = w.take(rows);
      d_top = stack.d_output_buffer();  // planned above; d top is read once, first, by the stack's backward
      tokens_dev = w.take_ints(rows);
      targets_dev = w.take_ints(rows);
      best = w.take_ints(rows);
      dequant = w.take_shared("weight.dequant", core.params.frozen() ? nn::weight_dx_scratch_size(head()) : 0);
      if (nn::LoraAdapter* a = head_adapter()) a->plan(w, static_cast<int>(logit_count));
    });
    tokens.reserve(static_cast<size_t>(B_cap) * T_cap);
    targets.reserve(static_cast<size_t>(B_cap) * T_cap);
  }

  void check_batch(std::span<const int32_t> in, const std::span<const int32_t>* tg, int B, int T) const {
    models::check_dims(B, T, config.context, "seq", "context");
    models::check_shape(in, "inputs", B, T, "batch", "seq");
    models::check_ids(in, "inputs", V);
    if (tg) {
      models::check_shape(*tg, "targets", B, T, "batch", "seq");
      models::check_ids(*tg, "targets", V);
    }
  }

  // whole: the pass needs every row's logits at once (not a training step).
  void load_batch(std::span<const int32_t> in, const std::span<const int32_t>* tg, int B, int T, bool whole) {
    check_batch(in, tg, B, T);
    ensure_capacity(B, T, whole ? LogitRows::Whole : LogitRows::Chunk);
    tokens.assign(in.begin(), in.end());
    token_ids = core.ids(tokens_dev, tokens);
    if (tg) {
      targets.assign(tg->begin(), tg->end());
      target_ids = core.ids(targets_dev, targets);
    }
  }

  // tokens (B,T) -> the stack's output (B,T,C)
  void forward_stack(int B, int T, bool train_pass) {
    caches_owner = 0;  // the caches stay, but a paused Generation must not trust them (weights may change next)
    drop = core.next_dropout(train_pass);
    embedding.forward(stack.input(), token_ids, B, T, drop);
    stack.forward({nullptr, true}, B, T, drop);
  }

  // tokens (B,T) -> logits (B,T,V), every row at once (LogitRows::Whole)
  void forward(int B, int T, bool train_pass) {
    forward_stack(B, T, train_pass);
    // logits = top (rows,C) W^T (C,V), W the head (tied: the token embedding)
    nn::weight_product(ops(), head(), 0, V, stack.output().data(), C, B * T, logits.data(), V);
    if (nn::LoraAdapter* a = head_adapter())
      a->forward(ops(), 0, 0, V, stack.output().data(), C, B * T, logits.data(), V, drop);
  }

  // Generation with the KV caches: tokens (B,Tn), the positions after the cached ones, through the layers;
  // logits (B,V) of each row's last position only (stack output rows Tn*C apart).
  void forward_cached(const int32_t* toks, int B, int Tn) {
    drop = core.next_dropout(false);
    const ops::Ids ids = core.ids(tokens_dev, {toks, static_cast<size_t>(B) * Tn});
    embedding.forward(stack.input(), ids, B, Tn, drop, caches.length());
    stack.forward({nullptr, true}, B, Tn, drop, caches.layers());
    const float* last = stack.output().data() + static_cast<size_t>(Tn - 1) * C;
    // The plan's promise (ensure_capacity: LogitRows), checked: the head writes B rows of V here.
    check(logits.size() >= static_cast<size_t>(B) * V, "generate: the workspace holds ", logits.size() / V,
          " rows of logits for a batch of ", B, " (internal: the plan is short)");
    nn::weight_product(ops(), head(), 0, V, last, Tn * C, B, logits.data(), V);
    if (nn::LoraAdapter* a = head_adapter()) a->forward(ops(), 0, 0, V, last, Tn * C, B, logits.data(), V, drop);
  }

  models::LossSum loss(int rows) {
    return models::cross_entropy(core, losses, best, logits, target_ids, rows, V, INT32_MIN, 0.f);
  }

  // The head and the loss of a training pass, head_rows rows at a time (chunk_at), so that only a chunk's logits
  // exist.
  // For each chunk of rows [r0, r0 + n) of the stack's output top:
  //   z (n,V) = top W^T (+ the head adapter);  losses[r0 + i], dz = weight * d(mean loss)/dz  (one sweep, into z)
  //   with the gradient: d top (n,C) = dz W;  dW (V,C) += dz^T top (not for a frozen base: LoRA);  the adapter's.
  // Each row's loss and d top is the whole pass's; dW sums over the chunks in turn (the same sum when one chunk).
  // Without the gradient (ModelCore::accumulate's checked order, where a refused loss must leave no gradient) a head
  // that trains (head_trains) keeps only the losses, and the backward runs this again with the gradient once the
  // loss is known finite: one more head product, (rows, C) x (C, V), for GPT-2 124M about 10% of a full step's
  // FLOP. A head that does not train (LoRA without a "head" adapter) makes d top in this pass already: d top is no
  // gradient (it is the stack's backward that adds the adapters'), so the head runs once.
  models::ModelCore::PendingLoss head_loss(int rows, float weight, bool gradient) {
    models::ModelCore::PendingLoss l{CSpan(losses.first(static_cast<size_t>(rows))), 0};
    for (int r = 0; r < rows; ++r) l.count += target_ids.host[static_cast<size_t>(r)] != INT32_MIN;
    const float scale = l.count ? weight / static_cast<float>(l.count) : 0.f;
    const float* top = stack.output().data();
    nn::LoraAdapter* a = head_adapter();
    for (int r0 = 0, n; r0 < rows; r0 += n) {
      n = chunk_at(r0, rows);
      const float* x = top + static_cast<size_t>(r0) * C;
      const Span z = logits.first(static_cast<size_t>(n) * V);
      // The head's products over kVocabBlock of its rows at a time: the CPU gemm packs the whole of a transposed B
      // (here the (V, C) head: 147 MiB for GPT-2) into a per-thread buffer it keeps, unless the chunk has few enough
      // rows that it turns the product around and reads B in place (kernels/cpu/gemm.cpp: gemm_swapped); a block
      // packs (2048, C), 6 MiB, less than the stack's own products pack (blocks of 8192 rows packed 24 MiB).
      // Backwards over the blocks: the dx pass below walks them forwards, so each pass begins with the blocks the
      // pass before it ended with, still in the last-level cache (GPT-2's head is 154 MB, a block 6.3 MB). The
      // blocks write their own columns of z: the order changes no value.
      for (int v0 = (V - 1) / kVocabBlock * kVocabBlock; v0 >= 0; v0 -= kVocabBlock)
        nn::weight_product(ops(), head(), v0, std::min(kVocabBlock, V - v0), x, C, n, z.data() + v0, V);
      if (a) a->forward(ops(), 0, 0, V, x, C, n, z.data(), V, drop);
      const ops::Ids ids{target_ids.host.subspan(static_cast<size_t>(r0), static_cast<size_t>(n)),
                         target_ids.device ? target_ids.device + r0 : nullptr};
      ops().crossentropy_forward_backward(losses.subspan(static_cast<size_t>(r0), static_cast<size_t>(n)), z, z, ids,
                                          scale, n, V, INT32_MIN, 0.f);
      if (!gradient && head_trains()) continue;
      float* dx = d_top.data() + static_cast<size_t>(r0) * C;
      for (int v0 = 0; v0 < V; v0 += kVocabBlock)  // dx = sum over the blocks of dz[:, block] W[block]
        nn::weight_product_dx(ops(), head(), v0, std::min(kVocabBlock, V - v0), z.data() + v0, V, n, dx, C,
                              v0 == 0 ? 0.f : 1.f, dequant);
      if (!core.params.frozen()) ops().gemm(true, false, V, C, n, 1.f, z.data(), V, x, C, 1.f, head_grad(), C);
      if (a) a->backward(ops(), 0, 0, V, z.data(), V, x, n, dx, drop);
    }
    return l;
  }

  // A training pass's forward and loss with weight * d(mean loss)/d logits. fused: the head's backward too (d top
  // and the head's gradients, head_loss), for the steps that begin from zero gradients (train_step), which the
  // backward then completes; else the head's backward waits for backward().
  models::ModelCore::PendingLoss forward_loss(int B, int T, float weight, bool fused) {
    forward_stack(B, T, true);
    loss_weight = weight;
    return head_loss(B * T, weight, fused);
  }
  float loss_weight = 1.f;

  // Whether the head's backward adds to any gradient: its weight's (a base that trains) or its adapter's.
  bool head_trains() const { return !core.params.frozen() || head_adapter() != nullptr; }

  // The backward after forward_loss: the head's (unless fused, or made with the loss: head_loss), then the stack's
  // and the embedding's.
  void backward(int B, int T, bool fused) {
    if (!fused && head_trains()) head_loss(B * T, loss_weight, true);
    const Span d_emb = stack.backward(d_top, {nullptr, true}, B, T, drop);
    embedding.backward(d_emb, token_ids, B, T, drop);
  }

  float accumulate(std::span<const int32_t> in, std::span<const int32_t> tg, int B, int T, float weight) {
    load_batch(in, &tg, B, T, false);
    return core.accumulate([&] { return forward_loss(B, T, weight, false); }, [&] { backward(B, T, false); });
  }

  // A fused training step's head gradients were added before its loss was checked: when the step throws on the
  // CPU's checked path (a refused loss: NonFinite::Error), they are zeroed, as the step began (ModelCore::train_step
  // zeroes them too where the step is queued whole).
  template <class Step>
  auto fused_step(Step&& step) {
    models::ModelCore::PendingLoss pending{};
    try {
      return step(pending);
    } catch (...) {
      if (!pending.losses.empty() && (core.sync || !ops().queues_whole_steps()) &&
          !std::isfinite(core.read_loss(pending)))
        core.trained().zero_grad();
      throw;
    }
  }
};

LanguageModel::LanguageModel(const LanguageModelConfig& config, const OptimizerConfig& optimizer, Device device)
    : impl_(std::make_unique<Impl>(config, optimizer, device)) {}

LanguageModel::~LanguageModel() = default;

float LanguageModel::forward_backward(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch,
                                      int seq) {
  impl_->core.zero_grad();
  return impl_->accumulate(inputs, targets, batch, seq, 1.f);
}

float LanguageModel::train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq) {
  Impl& m = *impl_;
  m.load_batch(inputs, &targets, batch, seq, false);
  return m.fused_step([&](models::ModelCore::PendingLoss& pending) {
    return m.core.train_step(
        models::shape_key({batch, seq}), [&] { return pending = m.forward_loss(batch, seq, 1.f, true); },
        [&] { m.backward(batch, seq, true); });
  });
}

StepLoss LanguageModel::queue_train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch,
                                         int seq) {
  Impl& m = *impl_;
  m.load_batch(inputs, &targets, batch, seq, false);
  return m.fused_step([&](models::ModelCore::PendingLoss& pending) {
    return m.core.queue_train_step(
        models::shape_key({batch, seq}), [&] { return pending = m.forward_loss(batch, seq, 1.f, true); },
        [&] { m.backward(batch, seq, true); });
  });
}

float LanguageModel::accumulate(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq,
                                float weight) {
  check(std::isfinite(weight), "weight = ", weight, " is invalid: expected a finite number");
  return impl_->accumulate(inputs, targets, batch, seq, weight);
}

Metrics LanguageModel::evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq) {
  Impl& m = *impl_;
  m.load_batch(inputs, &targets, batch, seq, true);
  m.forward(batch, seq, false);
  return m.loss(batch * seq).metrics();
}

std::vector<float> LanguageModel::logits(std::span<const int32_t> inputs, int batch, int seq) {
  Impl& m = *impl_;
  m.load_batch(inputs, nullptr, batch, seq, true);
  m.forward(batch, seq, false);
  const size_t n = static_cast<size_t>(batch) * seq * m.V;
  std::vector<float> out(n);
  m.ops().download(out.data(), m.logits.data(), n * sizeof(float));
  models::check_finite_logits(out);
  return out;
}

std::vector<float> LanguageModel::attention(int layer) const {
  const Impl& m = *impl_;
  check(layer >= 0 && layer < m.L, "layer = ", layer, " is out of range: expected 0 <= layer < ", m.L);
  // Recomputing, the layer's forward may run again (nn/stack.h): the arena is scratch, so impl_ is not const here.
  std::vector<float> w = impl_->stack.attention_weights(layer);
  check(!w.empty(), "attention(", layer,
        "): no weights to show: no full forward pass has run since the model was made, loaded or last generated "
        "(generation keeps keys and values in its KV cache), or since a training step of a model that recomputes its "
        "activations (set_recompute; on with LoRA adapters); run logits() or evaluate() on the sequence");
  return w;
}

std::vector<int32_t> LanguageModel::generate(std::span<const int32_t> prompt, int max_tokens, float temperature,
                                             uint64_t seed) {
  check(max_tokens >= 0, "max_tokens = ", max_tokens, " is invalid: expected an integer >= 0");
  SamplingOptions options;
  options.max_new_tokens = max_tokens;
  options.temperature = temperature;
  options.seed = seed;
  return generate(prompt, options);
}

std::vector<int32_t> LanguageModel::generate(std::span<const int32_t> prompt, const SamplingOptions& options,
                                             const std::function<bool(int32_t token)>& on_token) {
  check(!prompt.empty(), "prompt is empty: expected at least one token id");
  models::check_ids(prompt, "prompt", impl_->V);
  const TokenCallback each = [&](int, int32_t token, std::span<const float>) { return !on_token || on_token(token); };
  return std::move(generate(prompt, 1, static_cast<int>(prompt.size()), options, each).front());
}

// The state of a generation between two steps: generate() runs its steps back to back, a Generation one
// per next(). Every row has the same length n: a row that has stopped keeps being fed (token 0), unseen.
struct LanguageModel::Generation::State {
  Impl& m;
  const SamplingOptions options;
  const int batch, ctx;
  // Positions the KV cache holds: the context, or fewer when the generation ends before it fills (the prompt and
  // max_new_tokens less the last token, which is never fed). For GPT-2 124M the full context is 75 MB of keys and
  // values, which the wasm build's calloc clears and so touches, though a 32-token prompt and 64 new tokens use 7.
  const int cache_positions;
  const uint64_t id;  // for Impl::caches_owner
  std::vector<std::vector<int32_t>> seq, out;
  std::vector<Rng> rngs;
  std::vector<uint8_t> done;
  std::vector<int32_t> window;  // (B, ctx)
  int start = 0;                // with the cache: the position-0 token of the window it holds
  int made = 0;                 // steps taken
  bool ended = false;

  State(Impl& model, std::span<const int32_t> prompts, int B, int prompt_len, const SamplingOptions& o)
      : m(model),
        options(o),
        batch(B),
        ctx(model.config.context),
        cache_positions(static_cast<int>(std::min<int64_t>(ctx, int64_t{prompt_len} + std::max(0, o.max_new_tokens)))),
        id(++model.generations) {
    check(batch >= 1, "batch = ", batch, " is invalid: expected an integer >= 1");
    check(prompt_len >= 1, "prompt_len = ", prompt_len, " is invalid: expected an integer >= 1");
    models::check_shape(prompts, "prompts", batch, prompt_len, "batch", "prompt_len");
    models::check_ids(prompts, "prompts", m.V);
    validate(options, m.V);
    // Without the cache every step runs the whole window, up to the context. With it, a step runs only the
    // positions it feeds (the prompt, then one a step; the context again only when the window slides), so the
    // arena is planned for those (step()): a 124M GPT-2 with context 1024 would otherwise plan a training
    // forward's activations and (1024, V) logits, about 1 GB that decoding never reads, and the wasm build
    // clears and touches all of it.
    if (!options.use_cache) m.ensure_capacity(batch, ctx, Impl::LogitRows::Whole);
    const size_t rows = static_cast<size_t>(batch);
    seq.resize(rows);
    out.resize(rows);
    // Room for the tokens to come, up to a bound: an open-ended stream (a huge max_new_tokens that the
    // caller stops) must not allocate for all of them up front.
    const size_t room = static_cast<size_t>(std::min(options.max_new_tokens, 4096));
    for (size_t b = 0; b < rows; ++b) {
      seq[b].assign(prompts.begin() + static_cast<std::ptrdiff_t>(b * prompt_len),
                    prompts.begin() + static_cast<std::ptrdiff_t>((b + 1) * prompt_len));
      seq[b].reserve(static_cast<size_t>(prompt_len) + room);
      out[b].reserve(room);
      rngs.emplace_back(options.seed + b);
    }
    done.assign(rows, 0);
    window.resize(rows * static_cast<size_t>(ctx));
    ended = options.max_new_tokens == 0;
  }

  // window (B,T) = the tokens [from, from + T) of every row
  void gather(int from, int T) {
    for (size_t b = 0; b < seq.size(); ++b)
      std::copy_n(seq[b].begin() + from, T, window.begin() + static_cast<std::ptrdiff_t>(b * T));
  }

  // One token for every row still going, each passed to on_token. Returns false, doing nothing, once
  // generation has ended.
  bool step(const TokenCallback& on_token) {
    if (ended) return false;
    const int n = static_cast<int>(seq[0].size());
    const float* z;  // row b's next-token logits at z + b * z_stride
    size_t z_stride;
    if (options.use_cache) {
      if (m.caches_owner != id) {  // first step, or the model ran something else since the last one
        m.caches.reset(m.ops(), m.L, batch, cache_positions, m.C);
        m.caches_owner = id;
      }
      if (n - start > ctx) {  // the window slides: every position moves, so the cache starts over
        start = n - ctx;
        m.caches.clear();
      }
      const int fed = start + m.caches.length(), Tn = n - fed;
      // Only each sequence's last position's logits are made (forward_cached): not the whole window's (Tn x V floats,
      // 206 MB for GPT-2's 1024 positions).
      m.ensure_capacity(batch, Tn, Impl::LogitRows::Last, m.caches.capacity());
      gather(fed, Tn);
      m.forward_cached(window.data(), batch, Tn);
      // The next-token logits (B,V) come to the host, where the sampler chooses (infer/sampling.cpp).
      z = m.core.to_host(CSpan(m.logits.first(static_cast<size_t>(batch) * m.V)), m.core.host_floats).data();
      z_stride = static_cast<size_t>(m.V);
    } else {
      const int T = std::min(n, ctx);
      gather(n - T, T);
      m.tokens.assign(window.begin(), window.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(batch) * T));
      m.token_ids = m.core.ids(m.tokens_dev, m.tokens);
      m.forward(batch, T, false);
      // Only each row's last position is sampled from: those B rows of V come to the host.
      const size_t V = static_cast<size_t>(m.V);
      m.core.host_floats.resize(static_cast<size_t>(batch) * V);
      for (int b = 0; b < batch; ++b)
        m.ops().download(m.core.host_floats.data() + b * V, m.logits.data() + (static_cast<size_t>(b) * T + T - 1) * V,
                         V * sizeof(float));
      z = m.core.host_floats.data();
      z_stride = V;
    }
    bool all_done = true, cancelled = false;
    for (size_t b = 0; b < seq.size(); ++b) {
      if (done[b]) {
        seq[b].push_back(0);
        continue;
      }
      const CSpan zb(z + b * z_stride, static_cast<size_t>(m.V));
      const int32_t next = sample_token(zb, seq[b], options, rngs[b].uniform());
      seq[b].push_back(next);
      out[b].push_back(next);
      done[b] = std::find(options.stop_tokens.begin(), options.stop_tokens.end(), next) != options.stop_tokens.end();
      all_done = all_done && done[b];
      if (on_token && !on_token(static_cast<int>(b), next, zb)) cancelled = true;
    }
    ended = all_done || cancelled || ++made == options.max_new_tokens;
    return true;
  }
};

std::vector<std::vector<int32_t>> LanguageModel::generate(std::span<const int32_t> prompts, int batch, int prompt_len,
                                                          const SamplingOptions& options,
                                                          const TokenCallback& on_token) {
  Generation::State g(*impl_, prompts, batch, prompt_len, options);
  while (g.step(on_token)) {
  }
  return std::move(g.out);
}

LanguageModel::Generation LanguageModel::start_generation(std::span<const int32_t> prompt,
                                                          const SamplingOptions& options) {
  check(!prompt.empty(), "prompt is empty: expected at least one token id");
  models::check_ids(prompt, "prompt", impl_->V);
  return Generation(std::make_unique<Generation::State>(*impl_, prompt, 1, static_cast<int>(prompt.size()), options));
}

LanguageModel::Generation::Generation(std::unique_ptr<State> state) : state_(std::move(state)) {}
LanguageModel::Generation::Generation(Generation&&) noexcept = default;
LanguageModel::Generation& LanguageModel::Generation::operator=(Generation&&) noexcept = default;
LanguageModel::Generation::~Generation() = default;

std::optional<int32_t> LanguageModel::Generation::next() {
  std::optional<int32_t> token;
  if (state_)
    state_->step([&](int, int32_t t, std::span<const float>) {
      token = t;
      return true;
    });
  return token;
}

const LanguageModelConfig& LanguageModel::config() const { return impl_->config; }

// A qkv checkpoint streams into a model built without initial values or training state (ForLoading): every
// weight is overwritten, and gradients and moments wait for the first training call.
std::unique_ptr<LanguageModel> LanguageModel::load(std::span<const uint8_t> bytes) {
  std::unique_ptr<LanguageModel> m;
  const auto make = [&](const io::Checkpoint& c) -> models::ModelCore& {
    const nn::Parameters::ForLoading loading(&c.formats);  // a quantized checkpoint's tensors packed from the start
    m = std::make_unique<LanguageModel>(language_model_config_from_json(c.config_json), c.optimizer);
    return m->impl_->core;
  };
  if (io::load_bytes_streaming(bytes, "language_model", make)) return m;
  // A foreign state dict (io/import.h) is mapped as a whole.
  const io::Checkpoint c = io::read_checkpoint(bytes, "language_model");
  m = std::make_unique<LanguageModel>(models::checkpoint_config(c, "language_model", language_model_config_from_json),
                                      c.optimizer);
  io::restore_checkpoint(m->impl_->core, c);
  return m;
}
std::unique_ptr<LanguageModel> LanguageModel::load_file(const std::string& path) {
  std::unique_ptr<LanguageModel> m;
  const auto make = [&](const io::Checkpoint& c) -> models::ModelCore& {
    const nn::Parameters::ForLoading loading(&c.formats);  // a quantized checkpoint's tensors packed from the start
    m = std::make_unique<LanguageModel>(language_model_config_from_json(c.config_json), c.optimizer);
    return m->impl_->core;
  };
  if (io::load_file_streaming(path, "language_model", make)) return m;
  return io::with_path(path, [&] { return load(io::read_file(path)); });
}

models::ModelCore& LanguageModel::core() { return impl_->core; }
const char* LanguageModel::kind() const { return "language_model"; }
std::string LanguageModel::config_json() const { return to_json(impl_->config); }
bool LanguageModel::tied_head() const { return impl_->lm_head == nullptr; }
void LanguageModel::reset(bool moved) {
  if (moved) {
    impl_->B_cap = impl_->T_cap = impl_->K_cap = 0;
    impl_->logit_rows = Impl::LogitRows::Last;
  }
  impl_->caches_owner = 0;  // keys and values of the old weights, or of the old device
}

}  // namespace qkv
