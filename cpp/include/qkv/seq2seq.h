#pragma once
// Seq2Seq: the encoder-decoder Transformer of "Attention Is All You Need" and the PyTorch translation
// tutorial, with torch.nn.Transformer's parameter names (encoder.layers.N..., encoder.norm, decoder...).
//
//   src (B,S) -> src embedding (x sqrt(C)) + positions -> encoder layers (source padding mask)
//     -> encoder.norm -> memory (B,S,C)
//   tgt_in (B,T) -> tgt embedding + positions -> decoder layers (causal + target padding mask on self-
//     attention; source padding on cross-attention) -> decoder.norm -> generator -> logits (B,T,V_tgt)
//   loss: cross-entropy against tgt_out, ignoring pad_id, with optional label smoothing
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

struct Seq2SeqConfig {
  int src_vocab = 0;
  int tgt_vocab = 0;
  int context = 0;  // the longest source or target sequence (the position table's length)
  int d_model = 0;
  int heads = 0;
  int encoder_layers = 0;
  int decoder_layers = 0;
  int d_ff = 0;  // 0 means 4 * d_model
  uint64_t seed = 1337;
  Activation activation = Activation::ReLU;
  NormPosition norm = NormPosition::Post;
  bool bias = true;
  float dropout = 0.f;
  Positions positions = Positions::Sinusoidal;
  bool scale_embedding = true;
  bool final_norm = true;  // encoder.norm and decoder.norm, as nn.Transformer has them
  int pad_id = 0;          // padding in src and tgt: masked in attention, ignored by the loss
  float label_smoothing = 0.f;
};

enum class AttentionKind { EncoderSelf, DecoderSelf, Cross };

// How Seq2Seq::generate decodes: greedy (beam_width 1) or beam search. The encoder runs once per call.
// Beam search keeps beam_width hypotheses per source row and stops a row once beam_width of them have
// ended with eos (or at max_len); each is scored log P / ((5 + len) / 6)^length_penalty, GNMT's length
// penalty with the paper's 0.6 (len: generated tokens, eos included). Width 1 is greedy decoding exactly.
struct DecodeOptions {
  int bos = -1, eos = -1;       // the target's start and end tokens (required)
  int max_len = 0;              // tokens to generate at most, eos included: 1 <= max_len < context
  int beam_width = 1;           // 1 = greedy
  float length_penalty = 0.6f;  // alpha >= 0; 0 ranks by log P alone
  bool use_cache = true;        // KV caches (see SamplingOptions::use_cache); false re-runs the decoder prefix
};

struct Decoded {
  std::vector<int32_t> tokens;   // (batch, max_len): each row's best hypothesis, eos included, pad_id after it
  std::vector<float> scores;     // (batch): its score, log P / length penalty
  std::vector<int32_t> lengths;  // (batch): its length in tokens, eos included
};

class Seq2Seq final : public Model {
 public:
  // `device`: where the model lives and computes (LanguageModel's constructor says more).
  explicit Seq2Seq(const Seq2SeqConfig& config, const OptimizerConfig& optimizer = {}, Device device = Device::CPU);
  ~Seq2Seq() override;

  // src (batch, src_len); tgt_in and tgt_out (batch, tgt_len): the target shifted right (starting with bos)
  // and the target itself. Returns the mean loss over non-pad target positions, before the update.
  float train_step(std::span<const int32_t> src, std::span<const int32_t> tgt_in, std::span<const int32_t> tgt_out,
                   int batch, int src_len, int tgt_len);
  // train_step queued, its loss read later: LanguageModel::queue_train_step.
  StepLoss queue_train_step(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                            std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len);
  float forward_backward(std::span<const int32_t> src, std::span<const int32_t> tgt_in,
                         std::span<const int32_t> tgt_out, int batch, int src_len, int tgt_len);
  // Gradient accumulation: zero_grad(), then accumulate() adds weight * d(mean loss) per batch, then
  // apply_gradients() takes one optimizer step (false when skipped). A non-finite loss or gradient norm
  // throws, or under NonFinite::Skip skips the step, as LanguageModel::train_step and apply_gradients.
  float accumulate(std::span<const int32_t> src, std::span<const int32_t> tgt_in, std::span<const int32_t> tgt_out,
                   int batch, int src_len, int tgt_len, float weight = 1.f);
  Metrics evaluate(std::span<const int32_t> src, std::span<const int32_t> tgt_in, std::span<const int32_t> tgt_out,
                   int batch, int src_len, int tgt_len);
  // Logits (batch, tgt_len, tgt_vocab).
  std::vector<float> logits(std::span<const int32_t> src, std::span<const int32_t> tgt_in, int batch, int src_len,
                            int tgt_len);
  // Decodes each source row (src: (batch, src_len)) with DecodeOptions: greedy or beam search, with the
  // KV caches by default. Throws qkv::Error naming the field for bad input or options.
  Decoded generate(std::span<const int32_t> src, int batch, int src_len, const DecodeOptions& options);
  // Greedy decoding: for each source row, start from bos and append the argmax token until eos or max_len
  // tokens. Returns (batch, max_len) ids, pad_id after eos: generate(...).tokens with beam_width 1.
  std::vector<int32_t> greedy(std::span<const int32_t> src, int batch, int src_len, int bos, int eos, int max_len);
  // Attention weights (B, H, Tq, Tk) of one layer from the last forward.
  std::vector<float> attention(AttentionKind kind, int layer) const;

  const Seq2SeqConfig& config() const;

  static std::unique_ptr<Seq2Seq> load(std::span<const uint8_t> bytes);
  static std::unique_ptr<Seq2Seq> load_file(const std::string& path);

 private:
  models::ModelCore& core() override;
  const char* kind() const override;
  std::string config_json() const override;
  void reset(bool moved) override;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv
