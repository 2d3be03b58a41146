#pragma once
// Multi-head attention with torch.nn.MultiheadAttention's parameters and names: in_proj_weight (3C, C)
// holding W_q | W_k | W_v, in_proj_bias (3C), out_proj (C, C) + bias; biases optional.
// Self-attention passes the same input as query and key/value; cross-attention passes the encoder memory.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html
#include <string>
#include <vector>

#include "nn/dropout.h"
#include "nn/feed_forward.h"
#include "nn/linear.h"
#include "nn/saved.h"
#include "qkv/workspace.h"

namespace qkv::nn {

struct AttentionMask {
  const uint8_t* key_pad = nullptr;  // (B, Tk), nonzero = padding; device memory
  bool causal = false;
};

// Keys and values kept across forward calls, so that generation costs one step per new token instead of a
// re-run of the whole context (inference only: no backward goes through it). The storage, (B, capacity, 2C)
// holding k | v per row as the layer's kv buffer does, is device memory that belongs to the caller
// (infer/kv_cache.h).
//   self-attention (fixed = false): a call with Tq new rows appends their keys and values at `length`, and
//     its queries, positions length .. length + Tq - 1, attend causally over all length + Tq keys;
//   cross-attention (fixed = true): the first call projects the memory (capacity = its S rows); later calls
//     reuse it.
struct KvCache {
  float* kv = nullptr;
  int capacity = 0;
  int length = 0;  // positions filled
  bool fixed = false;
};

class MultiHeadAttention {
 public:
  MultiHeadAttention(Parameters& params, const std::string& prefix, int C, int H, bool bias, float init_std,
                     float out_init_std);
  // saved: where q, kv, y and lse go (nn/saved.h: the module's own buffers, or a recomputing stack's shared ones).
  // spare: the layer's feed-forward's buffers (FeedForward::spare), free whenever this module's backward runs (the
  // layer runs the feed-forward's backward first): the backward's dq, dy and dkv go there when they fit, instead of
  // scratch of their own. GPT-2 124M at 8 x 128 rows: 12 MiB.
  // cached_keys: the key rows of a KV cache that forward() may attend over (its capacity; 0: none): the attention op's
  // scratch grows with the keys, and a cached call feeds a few positions against all the cached keys.
  void plan(Workspace& ws, int B, int Tq, int Tk, const Saved& saved = {}, const FeedForward::Spare& spare = {},
            int cached_keys = 0);
  // xq (B,Tq,C), xkv (B,Tk,C) -> out (B,Tq,C). Attention dropout from `drop`. With a cache (KvCache above)
  // the keys come from it; its key_pad, if any, is (B, capacity); weights() is then unavailable.
  void forward(Span out, CSpan xq, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk, const Dropout& drop,
               KvCache* cache = nullptr);
  // dxq (B,Tq,C) is overwritten, then dxkv (B,Tk,C) ACCUMULATES (+=): for self-attention pass the same span
  // twice; for cross-attention dxkv is the memory's gradient, summed over decoder layers.
  void backward(Span dxq, Span dxkv, CSpan dout, CSpan xq, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk,
                const Dropout& drop);

  // The softmax weights (B,H,Tq,Tk) of the last forward (before dropout), on the host; empty before the first
  // (and after a new plan). The forward does not store them: they are recomputed from the q and k it keeps and
  // its own copy of the forward's padding mask.
  std::vector<float> weights() const;

 private:
  ops::Backend& ops() const { return params_.ops(); }
  ops::AttentionShape shape(const AttentionMask& mask, int B, int Tq, int Tk, const Dropout& drop) const;
  // [k | v] (rows, 2C) = x W_kv^T + b_kv (+ the adapters')
  void project_kv(float* kv, const float* x, int rows, const Dropout& drop);
  void forward_cached(Span out, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk, const Dropout& drop,
                      KvCache& cache);
  void append_to_cache(KvCache& cache, const float* kv, int B, int Tk);
  void attend_cached(Span out, const AttentionMask& mask, int B, int Tq, int q_pos, const Dropout& drop,
                     KvCache& cache);

  const Parameters& params_;
  int C_, H_;
  uint64_t stream_;
  Param& w_in_;
  Param* b_in_;
  // The LoRA sites of in_proj_weight (qkv/lora.h): "q", "k", "v" (its row blocks) and "qkv" (whole).
  LoraSite *site_q_, *site_k_, *site_v_, *site_qkv_;
  Linear out_proj_;
  Span q_, kv_, y_, lse_;  // (B,Tq,C), (B,Tk,2C), (B,Tq,C), (B,H,Tq): what the backward needs
  Span scratch_;           // the attention op's scratch (the CPU's tiles, one slot per thread)
  Span bias_scratch_;      // the bias gradient's (ops: bias_act_backward)
  Span dq_, dkv_, dy_;     // backward scratch, (B,Tq,C), (B,Tk,2C), (B,Tq,C)
  Span dequant_;           // a frozen quantized in_proj_weight's rows for dx (nn/weight_product.h)
  // The last forward's shape and masks, for weights(); pad_ (B,Tk) holds a copy of its key_pad.
  ops::AttentionShape last_{};
  std::span<uint8_t> pad_;
  bool has_last_ = false;
};

}  // namespace qkv::nn
