#pragma once
// Position-wise feed-forward: linear1 (C -> F) -> GELU -> linear2 (F -> C), named as in
// torch.nn.TransformerEncoderLayer.
#include <string>

#include "nn/linear.h"
#include "qkv/workspace.h"

namespace qkv::nn {

class FeedForward {
 public:
  FeedForward(Parameters& params, const std::string& prefix, int C, int F, float init_std, float out_init_std);
  void plan(Workspace& ws, int rows);
  // x, y: (rows, C)
  void forward(Span y, CSpan x, int rows);
  // dx (rows, C) is overwritten.
  void backward(Span dx, CSpan dy, CSpan x, int rows);

 private:
  int F_;
  Linear linear1_, linear2_;
  Span h_, a_, da_;  // (rows, F): pre-activation, GELU output, gradient scratch
};

}  // namespace qkv::nn
