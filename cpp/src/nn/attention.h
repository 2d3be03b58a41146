#pragma once
// Causal multi-head self-attention with torch.nn.MultiheadAttention's parameters:
// in_proj (3C, C) + bias giving q | k | v, and out_proj (C, C) + bias.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html
#include <string>

#include "nn/linear.h"
#include "qkv/workspace.h"

namespace qkv::nn {

class CausalSelfAttention {
 public:
  CausalSelfAttention(Parameters& params, const std::string& prefix, int C, int H, float init_std, float out_init_std);
  void plan(Workspace& ws, int B, int T);
  // x, out: (B,T,C)
  void forward(Span out, CSpan x, int B, int T);
  // dx (B,T,C) is overwritten.
  void backward(Span dx, CSpan dout, CSpan x, int B, int T);

  // The attention weights (B,H,T,T) of the last forward.
  CSpan weights() const { return att_; }

 private:
  int C_, H_;
  Linear in_proj_, out_proj_;
  Span qkv_, att_, y_;     // forward: (B,T,3C), (B,H,T,T), (B,T,C)
  Span dqkv_, datt_, dy_;  // backward scratch, same shapes
};

}  // namespace qkv::nn
