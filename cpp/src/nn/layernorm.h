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
  // The residual add fused in: r = x + f (rows, C) is written (it is the stream, and this norm's input for
  // the backward), y = LN(r). r may alias x or f.
  void forward_residual(Span r, Span y, CSpan x, CSpan f, int rows);
  // dx = dr + LN'(dy), x the forward's input. dr is the gradient along the residual path: it may alias dx
  // (dx accumulates) or be empty (dx = LN'(dy)).
  void backward(Span dx, CSpan dr, CSpan dy, CSpan x, int rows);

 private:
  ops::Backend& ops() const { return params_.ops(); }

  const Parameters& params_;
  int C_;
  Param& w_;
  Param& b_;
  Span mean_, rstd_;  // (rows)
  Span scratch_;      // the backward's, shared by every LayerNorm
  // A frozen base (LoRA): the op still writes dw and db; they go here, shared and never read (2C floats).
  Span frozen_grads_;
};

// A LayerNorm and the buffer its output goes to: where a residual sum is normalised next, so the add that
// makes the sum and the norm that reads it run as one pass (Residual::forward).
struct NormInto {
  LayerNorm* norm = nullptr;
  Span y;
};

}  // namespace qkv::nn
