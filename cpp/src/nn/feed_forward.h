#pragma once
// Position-wise feed-forward, as in torch.nn.TransformerEncoderLayer:
//   y = linear2(dropout(activation(linear1(x))))     linear1: C -> F, linear2: F -> C
#include <string>

#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/saved.h"
#include "qkv/options.h"
#include "qkv/workspace.h"

namespace qkv::nn {

class FeedForward {
 public:
  FeedForward(Parameters& params, const std::string& prefix, int C, int F, Activation activation, bool bias,
              float init_std, float out_init_std);
  // saved: where h and a go (nn/saved.h).
  void plan(Workspace& ws, int rows, const Saved& saved = {});
  // x, y: (rows, C)
  void forward(Span y, CSpan x, int rows, const Dropout& drop);
  // dx (rows, C) is overwritten.
  void backward(Span dx, CSpan dy, CSpan x, int rows, const Dropout& drop);

  // Two (rows, F) buffers whose contents are dead once backward() has returned (h and a, da written over one of
  // them): the layer's later backward work may use them as scratch until the next forward. Sizes as of the last
  // plan; the spans are empty during the plan's counting pass, the sizes are not. `free` is the one of the two that
  // backward() no longer reads by the time it writes its dx (GELU: h, read by the activation's derivative before
  // the last product; ReLU: a, likewise; the other holds da), so dx itself may be written there.
  struct Spare {
    Span first, second;
    size_t floats = 0;  // each
    Span free;
  };
  Spare spare() const { return {h_, a_, spare_floats_, da_.data() == a_.data() ? h_ : a_}; }

 private:
  ops::Backend& ops() const { return params_.ops(); }

  const Parameters& params_;
  int F_;
  ops::Act act_;
  uint64_t stream_;
  Linear linear1_, linear2_;
  Span h_, a_, da_;  // (rows, F): pre-activation (bias added), activation output (after dropout), gradient
  size_t spare_floats_ = 0;
};

}  // namespace qkv::nn
