#pragma once
// LayerNorm over the channel dimension, with weight and bias; keeps mean and rstd for the backward.
#include <string>

#include "nn/parameters.h"
#include "qkv/workspace.h"

namespace qkv::nn {

class LayerNorm {
 public:
  LayerNorm(Parameters& params, const std::string& prefix, int C);
  void plan(Workspace& ws, int rows);
  // x, y: (rows, C)
  void forward(Span y, CSpan x, int rows);
  // dx ACCUMULATES (+=): it is always a residual stream's gradient.
  void backward(Span dx, CSpan dy, CSpan x, int rows);

 private:
  int C_;
  Param& w_;
  Param& b_;
  Span mean_, rstd_;  // (rows)
};

}  // namespace qkv::nn
