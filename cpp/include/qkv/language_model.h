#pragma once
// LanguageModel: a decoder-only (GPT-style) Transformer that trains and samples.
//
//   tokens (B,T) -> token embedding + learned positions -> L pre-LN blocks
//     (x += attn(ln1(x)) with a causal mask; x += ffn(ln2(x)) with GELU) -> final LayerNorm
//     -> LM head tied to the token embedding -> logits (B,T,V) -> cross-entropy
//
// Training is forward, backward (layers in reverse order) and a fused AdamW step; all activations live in
// one workspace planned per (batch, sequence) shape, so a training loop at a fixed shape never allocates.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace qkv {

struct LanguageModelConfig {
  int vocab_size = 0;  // V
  int context = 0;     // the longest sequence, T_max (size of the learned position table)
  int d_model = 0;     // C
  int heads = 0;       // H; d_model must be divisible by heads
  int layers = 0;      // L
  int d_ff = 0;        // feed-forward width; 0 means 4 * d_model
  uint64_t seed = 1337;
};

// reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to tensors with 2+ dimensions only (as nanoGPT), not biases or norms
  float grad_clip = 1.0f;     // clip the global gradient norm to this; 0 turns clipping off
};

class LanguageModel {
 public:
  // Throws qkv::Error naming the field when the configuration is invalid.
  explicit LanguageModel(const LanguageModelConfig& config, const AdamWConfig& optimizer = {});
  ~LanguageModel();
  LanguageModel(const LanguageModel&) = delete;
  LanguageModel& operator=(const LanguageModel&) = delete;

  // One optimisation step on a batch: inputs and targets are (batch, seq) token ids, row-major.
  // Returns the mean cross-entropy before the update. Throws qkv::Error on bad input, or when the loss
  // is not finite (then the weights are left unchanged).
  float train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);

  // The mean cross-entropy of a batch, without updating anything.
  float evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);

  // Logits (batch, seq, V) of a batch; the model's context bounds seq.
  std::vector<float> logits(std::span<const int32_t> inputs, int batch, int seq);

  // Samples max_tokens new tokens after `prompt` (temperature 0 = greedy); returns only the new tokens.
  // The context window slides when prompt + generated tokens exceed the context.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int max_tokens, float temperature, uint64_t seed);

  const LanguageModelConfig& config() const;
  const AdamWConfig& optimizer() const;
  void set_learning_rate(float lr);
  size_t num_parameters() const;
  int step() const;  // optimizer steps taken

  // Access for tests and tools: parameters and gradients by name (PyTorch-style names).
  struct ParameterView {
    const char* name;
    std::span<float> value;
    std::span<float> grad;
  };
  std::vector<ParameterView> parameters();
  // Forward + backward without the optimizer step (gradients are zeroed first); returns the loss.
  float forward_backward(std::span<const int32_t> inputs, std::span<const int32_t> targets, int batch, int seq);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv
