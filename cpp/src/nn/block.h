#pragma once
// A pre-LN Transformer decoder block without cross-attention (GPT-2 order):
//   x1 = x + attn(ln1(x))
//   y  = x1 + ffn(ln2(x1))
#include <string>

#include "nn/attention.h"
#include "nn/feed_forward.h"
#include "nn/layernorm.h"

namespace qkv::nn {

class Block {
 public:
  Block(Parameters& params, const std::string& prefix, int C, int H, int F, float init_std, float out_init_std);
  void plan(Workspace& ws, int B, int T);
  // x, y: (B,T,C)
  void forward(Span y, CSpan x, int B, int T);
  // dx (B,T,C) is overwritten.
  void backward(Span dx, CSpan dy, CSpan x, int B, int T);

  const CausalSelfAttention& attention() const { return attn_; }

 private:
  int C_;
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  FeedForward ffn_;
  Span ln1_out_, x1_, ln2_out_;  // forward, (B,T,C) each
  Span d_ln_out_, dx1_;          // backward scratch, (B,T,C) each
};

}  // namespace qkv::nn
