#pragma once
// A stack of encoder (or decoder) layers with its optional final LayerNorm, and the residual-stream buffers
// between layers. The three models build on these: LanguageModel is an encoder stack with a causal mask,
// Classifier an encoder stack with a padding mask, Seq2Seq one of each.
//
// Activation recomputation ("gradient checkpointing", EncoderStack::plan with recompute): the stack keeps each
// layer's input (the residual stream xs, which it keeps anyway); everything else a layer saves for its backward,
// pre-LN its input's LayerNorm too, lives in buffers all its layers share (nn/saved.h). Pre-LN, a layer then
// normalises its own input (a pass over it) instead of taking the norm the previous layer's last add makes: that
// norm would land in the shared buffer the previous layer is still reading (the same values either way: the norm
// reads the sum the fused add stores). The backward re-runs layer l's forward, the same call on the same input with the
// same Dropout (the masks are counter-based hashes of the pass's seed: replayed, not redrawn), right before layer l's
// backward, so the gradients are bit for bit those of the stack that keeps everything, for one more forward of every
// layer but the last (whose internals the buffers still hold). GPT-2 124M at 8 x 128 rows: about 50 MiB of saved
// activations per layer, 12 layers, down to one layer's.
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
  // recompute: activation recomputation (above) for every pass until the next plan. cached_keys: the key rows of the
  // KV caches forward() may be given (their capacity; 0: none).
  void plan(Workspace& ws, int B, int T, bool recompute = false, int cached_keys = 0);
  // Write the embedded input into input(), run forward, read output() (B,T,C).
  Span input() { return xs_.front(); }
  CSpan output() const { return norm_ ? CSpan(out_) : CSpan(xs_.back()); }
  // caches: none, or one per layer (generation: the input holds T new positions after the cached ones).
  void forward(const AttentionMask& mask, int B, int T, const Dropout& drop, std::span<KvCache> caches = {});
  // Given d output (B,T,C), returns d input (B,T,C), a span owned by the stack.
  Span backward(CSpan d_output, const AttentionMask& mask, int B, int T, const Dropout& drop);
  // A (B,T,C) buffer of the stack's that the caller may fill with backward()'s d_output (the language model's d top)
  // instead of one of its own: backward reads it, first, before it writes there (it is the layers' gradient scratch).
  Span d_output_buffer() const { return d_b_; }

  int size() const { return static_cast<int>(layers_.size()); }
  const EncoderLayer& layer(int l) const { return *layers_[static_cast<size_t>(l)]; }
  // Layer l's self-attention weights of the last forward (MultiHeadAttention::weights; empty when there are none).
  // Recomputing, layer l's forward runs again on its kept input first, unless the shared buffers hold it; after a
  // backward (a training step, whose update changes the weights that re-running would read) there are none.
  std::vector<float> attention_weights(int l);

 private:
  // Layer l's forward as the stack runs it (the same call again when recomputing).
  void forward_layer(size_t l, const AttentionMask& mask, int B, int T, const Dropout& drop, KvCache* cache);

  const Parameters& params_;
  int C_;
  bool pre_;         // pre-LN: each layer's last add runs fused with the next norm (Residual)
  std::string key_;  // the shared saved buffers' key prefix (nn/saved.h)
  bool recompute_ = false;
  int held_ = -1;  // recomputing: the layer whose internals the shared buffers hold (-1: none)
  // The last forward's arguments, for attention_weights (full: it ran without caches, on the kept inputs).
  AttentionMask last_mask_;
  Dropout last_drop_;
  int last_B_ = 0, last_T_ = 0;
  bool last_full_ = false;
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
