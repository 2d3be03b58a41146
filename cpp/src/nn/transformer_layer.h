#pragma once
// Encoder and decoder layers with torch.nn.TransformerEncoderLayer / TransformerDecoderLayer's structure
// and parameter names (self_attn, multihead_attn, linear1, linear2, norm1..3), in post-LN (norm_first=False)
// or pre-LN (norm_first=True) order.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.TransformerEncoderLayer.html
// reference: https://pytorch.org/docs/stable/generated/torch.nn.TransformerDecoderLayer.html
#include <string>

#include "nn/attention.h"
#include "nn/feed_forward.h"
#include "nn/residual.h"

namespace qkv::nn {

// The hyper-parameters every layer of a stack shares.
struct LayerOptions {
  int C, H, F;
  Activation activation;
  NormPosition norm;
  bool bias;
  float init_std, out_init_std;
  bool dropout = true;  // the model's dropout can be on (p > 0): pre-LN residual blocks keep scratch for its backward
};

// x = sublayer(x, self-attention); x = sublayer(x, feed-forward). A causal mask makes it a GPT block.
class EncoderLayer {
 public:
  EncoderLayer(Parameters& params, const std::string& prefix, const LayerOptions& o);
  // saved (nn/saved.h): where the layer keeps what its backward reads. Shared (a recomputing stack), everything but
  // what another layer's forward writes: pre-LN, LN(x) and its statistics, which the previous layer's last add makes
  // (Residual::forward's `next`), stay the layer's own, so that re-running this layer's forward alone restores the
  // rest. cached_keys: MultiHeadAttention::plan's.
  void plan(Workspace& ws, int B, int T, const Saved& saved = {}, int cached_keys = 0);
  // x, y: (B,T,C). x_normed and next chain pre-LN layers in a stack (Residual::forward): x's LayerNorm is
  // already done, and next gets LN(y) in the pass that makes y.
  // With a cache, x holds T new positions after those the cache keeps (nn/attention.h's KvCache).
  void forward(Span y, CSpan x, const AttentionMask& mask, int B, int T, const Dropout& drop, bool x_normed = false,
               const NormInto& next = {}, KvCache* cache = nullptr);
  // dx (B,T,C) is overwritten.
  void backward(Span dx, CSpan dy, CSpan x, const AttentionMask& mask, int B, int T, const Dropout& drop);

  const MultiHeadAttention& self_attention() const { return attn_; }
  // Pre-LN: the LayerNorm of the layer's input, for the previous layer's `next`. Post-LN: none.
  NormInto input_norm() { return attn_res_.input_norm(); }

 private:
  int C_;
  MultiHeadAttention attn_;
  FeedForward ffn_;
  Residual attn_res_, ffn_res_;
  Span x1_, dx1_;  // between the two sublayers, (B,T,C)
};

// x = sublayer(x, causal self-attention); x = sublayer(x, cross-attention to memory); x = sublayer(x, FFN).
class DecoderLayer {
 public:
  DecoderLayer(Parameters& params, const std::string& prefix, const LayerOptions& o);
  void plan(Workspace& ws, int B, int T, int S);
  // x, y: (B,T,C); memory: (B,S,C). x_normed and next as EncoderLayer::forward.
  // With caches, x holds T new positions (self_cache) and the memory is read only while cross_cache is empty.
  void forward(Span y, CSpan x, CSpan memory, const AttentionMask& self_mask, const AttentionMask& memory_mask, int B,
               int T, int S, const Dropout& drop, bool x_normed = false, const NormInto& next = {},
               KvCache* self_cache = nullptr, KvCache* cross_cache = nullptr);
  // dx (B,T,C) is overwritten; dmemory (B,S,C) ACCUMULATES (+=).
  void backward(Span dx, Span dmemory, CSpan dy, CSpan x, CSpan memory, const AttentionMask& self_mask,
                const AttentionMask& memory_mask, int B, int T, int S, const Dropout& drop);

  const MultiHeadAttention& self_attention() const { return self_attn_; }
  const MultiHeadAttention& cross_attention() const { return cross_attn_; }
  NormInto input_norm() { return self_res_.input_norm(); }

 private:
  int C_;
  MultiHeadAttention self_attn_, cross_attn_;
  FeedForward ffn_;
  Residual self_res_, cross_res_, ffn_res_;
  Span x1_, x2_, dx1_, dx2_;  // (B,T,C)
};

}  // namespace qkv::nn
