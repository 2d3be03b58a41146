#pragma once
// LanguageModel: a decoder-only (GPT-style) Transformer that trains and samples.
//
//   tokens (B,T) -> token embedding (x sqrt(C) optional) + positions (learned or sinusoidal) -> dropout
//     -> L layers (self-attention with a causal mask, then feed-forward; pre-LN or post-LN)
//     -> final LayerNorm (optional) -> LM head (tied to the token embedding, or its own weight)
//     -> logits (B,T,V) -> cross-entropy
//
// Training is forward, backward (layers in reverse order) and an Adam(W) step; all activations live in one
// workspace planned per (batch, sequence) shape, so a training loop at a fixed shape never allocates.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/memory.h"
#include "qkv/model.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/parameter.h"
#include "qkv/sampling.h"
#include "qkv/tensor.h"

namespace qkv {

struct LanguageModelConfig {
  int vocab_size = 0;  // V
  int context = 0;     // the longest sequence, T_max
  int d_model = 0;     // C
  int heads = 0;       // H; d_model must be divisible by heads
  int layers = 0;      // L
  int d_ff = 0;        // feed-forward width; 0 means 4 * d_model
  uint64_t seed = 1337;
  Activation activation = Activation::GELU;
  NormPosition norm = NormPosition::Pre;
  bool bias = true;  // biases in attention and feed-forward projections
  float dropout = 0.f;
  Positions positions = Positions::Learned;
  bool scale_embedding = false;  // multiply token embeddings by sqrt(d_model)
  bool final_norm = true;
  bool tie_head = true;  // logits = x wte^T; otherwise an lm_head.weight (V, C)
};

class LanguageModel final : public Model {
 public:
  // Throws qkv::Error naming the field when the configuration is invalid, or when `device` is unavailable
  // (Device::CUDA without a GPU: the message gives cuda_unavailable_reason()).
  explicit LanguageModel(const LanguageModelConfig& config, const OptimizerConfig& optimizer = {},
                         Device device = Device::CPU);
  ~LanguageModel() override;

  // One optimisation step on a batch: inputs and targets are (batch, seq) token ids, row-major.
  // Returns the mean cross-entropy before the update. Throws qkv::Error on bad input. When the loss or
  // the gradient norm is not finite, the weights, Adam moments and step() are left unchanged and, as
  // OptimizerConfig::non_finite says, it throws qkv::Error (Error, the default) or returns with the step
  // skipped (Skip: last_step_skipped() is true, skipped_steps() grew by one; the returned loss is the
  // batch's, which may be finite when only the gradient was not).
  float train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);
  // train_step without waiting for the GPU: the step is queued and its loss read later (StepLoss::get), so the host
  // prepares and queues the next batch while the GPU runs this one. Up to three steps are in flight; a fourth waits
  // for the oldest. The steps compute exactly what train_step would; a non-finite step under NonFinite::Error
  // throws from the call that settles it (its get(), a later queue_train_step, step(), save, ...), with the
  // weights, moments and step() as they were before it, and the steps queued behind it do not run (their get()
  // throws). Bad input throws here. Where the host decides each step (the CPU, WebGPU, data parallel) the step
  // runs now, as train_step.
  StepLoss queue_train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);

  // Gradient accumulation: accumulate() adds weight * d(mean loss) to the gradients (zero them first with
  // zero_grad()); apply_gradients() then takes one optimizer step and returns true, or false when it was
  // skipped under NonFinite::Skip. Under Skip, a micro-batch whose loss is not finite returns that loss
  // without adding to the gradients, and the apply_gradients() that follows skips the whole step. With
  // nothing accumulated since zero_grad() apply_gradients() throws (Model::apply_gradients).
  float accumulate(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq,
                   float weight = 1.f);

  // Loss, next-token accuracy and perplexity of a batch, without updating anything (dropout off).
  Metrics evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);

  // Logits (batch, seq, V) of a batch; the model's context bounds seq.
  std::vector<float> logits(std::span<const int32_t> inputs, int batch, int seq);

  // The attention weights (B, H, T, T) of one layer from the last forward pass. A model that recomputes its
  // activations (Model::set_recompute; on with LoRA adapters) has none after a training step (qkv::Error: the update
  // changed the weights the layer would be re-run with): run logits() or evaluate() first.
  std::vector<float> attention(int layer) const;

  // Samples max_tokens new tokens after `prompt` (temperature 0 = greedy); returns only the new tokens.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int max_tokens, float temperature, uint64_t seed);

  // Generates up to options.max_new_tokens tokens after `prompt` with the sampling of qkv/sampling.h (the
  // repetition penalty sees the prompt and the tokens generated so far) and returns them. Each token is
  // passed to on_token as soon as it is chosen; generation ends early after a stop token (which is emitted)
  // or when on_token returns false. One uniform draw per token from a generator seeded with options.seed, so
  // the same options give the same tokens. Throws qkv::Error naming the field for invalid options.
  //
  // With options.use_cache (the default) the prompt runs once and each new token then costs one position
  // per layer against the kept keys and values. The prompt may be longer than the context: the model sees
  // the last `context` tokens. Once prompt + generated tokens exceed the context, the window slides one token
  // per step, and since every position then moves, each step re-runs the window (as without the cache).
  std::vector<int32_t> generate(std::span<const int32_t> prompt, const SamplingOptions& options,
                                const std::function<bool(int32_t token)>& on_token = {});

  // Batched: `batch` prompts of prompt_len tokens each, (batch, prompt_len) row-major, decoded together.
  // Row r samples with the seed options.seed + r, so it gets exactly the tokens generate(prompt r, options
  // with that seed) gives. A row that emits a stop token ends there while the others go on. on_token gets
  // each chosen token with its row and the logits (V) it was drawn from (before the sampling's processors);
  // returning false ends every row. Returns each row's new tokens.
  using TokenCallback = std::function<bool(int row, int32_t token, std::span<const float> logits)>;
  std::vector<std::vector<int32_t>> generate(std::span<const int32_t> prompts, int batch, int prompt_len,
                                             const SamplingOptions& options, const TokenCallback& on_token = {});

  // Generation one token per call, for callers that cannot be called back from inside generate() (a
  // JavaScript async iterator: its consumer runs between two tokens, on the same thread). Generation::next()
  // makes the next token that generate(prompt, options) makes, or returns std::nullopt once generation has
  // ended (max_new_tokens made, or a stop token emitted). Stopping is dropping the object; it costs nothing.
  // Other calls on the model between two tokens are allowed: after one that ran the model or loaded weights,
  // the next token re-reads the tokens so far (rebuilding the KV cache) under the weights as they are then.
  // The model must outlive its Generations. Throws qkv::Error as generate() does for invalid arguments.
  class Generation;
  Generation start_generation(std::span<const int32_t> prompt, const SamplingOptions& options);

  const LanguageModelConfig& config() const;

  static std::unique_ptr<LanguageModel> load(std::span<const uint8_t> bytes);
  static std::unique_ptr<LanguageModel> load_file(const std::string& path);
  // Forward + backward without the optimizer step (gradients are zeroed first); returns the loss.
  float forward_backward(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);

 private:
  models::ModelCore& core() override;
  const char* kind() const override;
  std::string config_json() const override;
  void reset(bool moved) override;
  bool tied_head() const override;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// See LanguageModel::start_generation.
class LanguageModel::Generation {
 public:
  Generation(Generation&&) noexcept;
  Generation& operator=(Generation&&) noexcept;
  ~Generation();

  // The next new token, or std::nullopt when generation has ended (then every later call returns nullopt).
  std::optional<int32_t> next();

 private:
  friend class LanguageModel;
  struct State;
  explicit Generation(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace qkv
