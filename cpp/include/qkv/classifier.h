#pragma once
// Classifier: a Transformer encoder with a classification head, as the PyTorch text-classification
// tutorials build it.
//
//   tokens (B,T) -> token embedding (x sqrt(C) optional) + positions -> encoder layers (padding mask)
//     -> encoder.norm (optional) -> pool: the first ([CLS]) token, or the mean over non-pad tokens (a row that is
//        all padding pools zeros, as its attention, with no key to read, outputs zeros: no NaN, and its logits
//        are the head's answer to a zero vector)
//     -> head: Linear(C, classes), or Linear(C, C/2) -> ReLU -> dropout -> Linear(C/2, classes)
//   loss: cross-entropy against the labels
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qkv/memory.h"
#include "qkv/model.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/parameter.h"
#include "qkv/tensor.h"

namespace qkv {

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

class Classifier final : public Model {
 public:
  // `device`: where the model lives and computes (LanguageModel's constructor says more).
  explicit Classifier(const ClassifierConfig& config, const OptimizerConfig& optimizer = {},
                      Device device = Device::CPU);
  ~Classifier() override;

  // tokens (batch, seq); labels (batch) in [0, classes). Returns the mean loss before the update.
  float train_step(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  // train_step queued, its loss read later: LanguageModel::queue_train_step.
  StepLoss queue_train_step(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  float forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  // Gradient accumulation: zero_grad(), then accumulate() adds weight * d(mean loss) per batch, then
  // apply_gradients() takes one optimizer step (false when skipped). A non-finite loss or gradient norm
  // throws, or under NonFinite::Skip skips the step, as LanguageModel::train_step and apply_gradients.
  float accumulate(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq,
                   float weight = 1.f);
  Metrics evaluate(std::span<const int32_t> tokens, std::span<const int32_t> labels, int batch, int seq);
  // Logits (batch, classes).
  std::vector<float> logits(std::span<const int32_t> tokens, int batch, int seq);
  // Attention weights (B, H, T, T) of one encoder layer from the last forward.
  std::vector<float> attention(int layer) const;

  const ClassifierConfig& config() const;

  static std::unique_ptr<Classifier> load(std::span<const uint8_t> bytes);
  static std::unique_ptr<Classifier> load_file(const std::string& path);

 private:
  models::ModelCore& core() override;
  const char* kind() const override;
  std::string config_json() const override;
  void reset(bool moved) override;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv
