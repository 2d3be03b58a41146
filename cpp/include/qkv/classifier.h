#pragma once
// Classifier: a Transformer encoder with a classification head, as the PyTorch text-classification
// tutorials build it.
//
//   tokens (B,T) -> token embedding (x sqrt(C) optional) + positions -> encoder layers (padding mask)
//     -> encoder.norm (optional) -> pool: the first ([CLS]) token, or the mean over non-pad tokens
//     -> head: Linear(C, classes), or Linear(C, C/2) -> ReLU -> dropout -> Linear(C/2, classes)
//   loss: cross-entropy against the labels
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qkv/memory.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/parameter.h"
#include "qkv/tensor.h"

namespace qkv {

namespace dist {
class GradientSync;
}

struct ClassifierConfig {
  int vocab_size = 0;
  int context = 0;
  int d_model = 0;
  int heads = 0;
  int layers = 0;
  int d_ff = 0;  // 0 means 4 * d_model
  int classes = 0;
  uint64_t seed = 1337;
  Activation activation = Activation::ReLU;
  NormPosition norm = NormPosition::Post;
  bool bias = true;
  float dropout = 0.f;
  Positions positions = Positions::Sinusoidal;
  bool scale_embedding = true;
  bool final_norm = true;
  Pooling pooling = Pooling::First;
  ClassifierHead head = ClassifierHead::MLP;
  int pad_id = 0;
};

class Classifier {
 public:
  // `device`: where the model lives and computes (LanguageModel's constructor says more).
  explicit Classifier(const ClassifierConfig& config, const OptimizerConfig& optimizer = {},
                      Device device = Device::CPU);
  ~Classifier();
  Classifier(const Classifier&) = delete;
  Classifier& operator=(const Classifier&) = delete;

  // tokens (batch, seq); labels (batch) in [0, classes). Returns the mean loss before the update.
  float train_step(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  float forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  // Gradient accumulation: zero_grad(), then accumulate() adds weight * d(mean loss) per batch, then
  // apply_gradients() takes one optimizer step (false when skipped). A non-finite loss or gradient norm
  // throws, or under NonFinite::Skip skips the step, as LanguageModel::train_step and apply_gradients.
  void zero_grad();
  float accumulate(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq,
                   float weight = 1.f);
  bool apply_gradients();
  Metrics evaluate(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  // Logits (batch, classes).
  std::vector<float> logits(std::span<const int32_t> tokens, int batch, int seq);
  // Attention weights (B, H, T, T) of one encoder layer from the last forward.
  std::vector<float> attention(int layer) const;

  // The model's device, and a move to another (LanguageModel::to says more).
  Device device() const;
  void to(Device device);

  // Data-parallel training (cpp/src/dist): from now on apply_gradients() sums every rank's gradients into this
  // replica's before the step (each rank gives accumulate() the weight of its share of the global batch), the
  // sums overlapping the backward. nullptr: this process trains alone again. The caller keeps `sync` alive.
  void set_gradient_sync(dist::GradientSync* sync);
  const ClassifierConfig& config() const;
  const OptimizerConfig& optimizer() const;
  void set_training(bool training);
  void set_learning_rate(float lr);
  void set_non_finite(NonFinite policy);  // as LanguageModel::set_non_finite
  size_t num_parameters() const;
  // Bytes held: weights, gradients, Adam moments, and the activation arena of the largest shape planned.
  MemoryUsage memory() const;
  int step() const;
  int skipped_steps() const;       // as LanguageModel::skipped_steps
  bool last_step_skipped() const;  // as LanguageModel::last_step_skipped
  std::vector<ParameterView> parameters();

  // Checkpoints: safetensors with the weights under their PyTorch-style names, the config in the metadata
  // and, with_optimizer, the Adam moments and step counts (taken and skipped) so training resumes exactly.
  // save_file writes a temporary file and renames it into place: a failed save never damages an existing file.
  // `metadata` adds string keys to the file's "__metadata__" (e.g. "qkv.tokenizer", which `qkv generate`
  // reads); loading ignores them. A key the checkpoint writes itself ("qkv.model", "qkv.config",
  // "qkv.optimizer", "qkv.step", "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state", "qkv.version",
  // "qkv.crc32", "format") is refused with qkv::Error naming it.
  std::vector<uint8_t> save(bool with_optimizer = true, const std::map<std::string, std::string>& metadata = {});
  void save_file(const std::string& path, bool with_optimizer = true,
                 const std::map<std::string, std::string>& metadata = {});
  static std::unique_ptr<Classifier> load(std::span<const uint8_t> bytes);
  static std::unique_ptr<Classifier> load_file(const std::string& path);
  // Loads a checkpoint's state into this model; its config must match this model's (else qkv::Error
  // naming the field) and nothing changes on error.
  void load_state(std::span<const uint8_t> bytes);
  // Loads only the weights, by name, from any safetensors file: a qkv checkpoint or a PyTorch state dict
  // saved with qkv's names (README). Every parameter must be present with its shape; nothing changes on error.
  void load_weights(std::span<const uint8_t> bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv
