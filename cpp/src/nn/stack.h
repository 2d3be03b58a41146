#pragma once
// A stack of encoder (or decoder) layers with its optional final LayerNorm, and the residual-stream buffers
// between layers. The three models build on these: LanguageModel is an encoder stack with a causal mask,
// Classifier an encoder stack with a padding mask, Seq2Seq one of each.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/layernorm.h"
#include "nn/transformer_layer.h"

namespace qkv::nn {

class EncoderStack {
 public:
  // Layers are named prefix + "layers.N." and the final norm norm_name (e.g. "encoder.norm" or "norm").
  EncoderStack(Parameters& params, const std::string& prefix, int layers, const LayerOptions& o, bool final_norm,
               const std::string& norm_name);
  void plan(Workspace& ws, int B, int T);
  // Write the embedded input into input(), run forward, read output() (B,T,C).
  Span input() { return xs_.front(); }
  CSpan output() const { return norm_ ? CSpan(out_) : CSpan(xs_.back()); }
  // caches: none, or one per layer (generation: the input holds T new positions after the cached ones).
  void forward(const AttentionMask& mask, int B, int T, const Dropout& drop, std::span<KvCache> caches = {});
  // Given d output (B,T,C), returns d input (B,T,C), a span owned by the stack.
  Span backward(CSpan d_output, const AttentionMask& mask, int B, int T, const Dropout& drop);

  int size() const { return static_cast<int>(layers_.size()); }
  const EncoderLayer& layer(int l) const { return *layers_[static_cast<size_t>(l)]; }

 private:
  const Parameters& params_;
  int C_;
  bool pre_;  // pre-LN: each layer's last add runs fused with the next norm (Residual)
  std::vector<std::unique_ptr<EncoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  std::vector<size_t> offsets_;  // where each layer's tensors, then the final norm's, begin in the flat buffers
  std::vector<Span> xs_;         // L+1 of (B,T,C)
  Span out_, d_a_, d_b_;
};

class DecoderStack {
 public:
  DecoderStack(Parameters& params, const std::string& prefix, int layers, const LayerOptions& o, bool final_norm,
               const std::string& norm_name);
  void plan(Workspace& ws, int B, int T, int S);
  Span input() { return xs_.front(); }
  CSpan output() const { return norm_ ? CSpan(out_) : CSpan(xs_.back()); }
  // self_caches, cross_caches: none, or one per layer each (generation).
  void forward(CSpan memory, const AttentionMask& self_mask, const AttentionMask& memory_mask, int B, int T, int S,
               const Dropout& drop, std::span<KvCache> self_caches = {}, std::span<KvCache> cross_caches = {});
  // Returns d input; d memory (B,S,C) ACCUMULATES into dmemory.
  Span backward(CSpan d_output, Span dmemory, CSpan memory, const AttentionMask& self_mask,
                const AttentionMask& memory_mask, int B, int T, int S, const Dropout& drop);

  int size() const { return static_cast<int>(layers_.size()); }
  const DecoderLayer& layer(int l) const { return *layers_[static_cast<size_t>(l)]; }

 private:
  const Parameters& params_;
  int C_;
  bool pre_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  std::vector<size_t> offsets_;
  std::vector<Span> xs_;
  Span out_, d_a_, d_b_;
};

}  // namespace qkv::nn
