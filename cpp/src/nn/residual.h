#pragma once
// One residual sublayer with its LayerNorm, in either order, and dropout on the sublayer's output:
//   pre-LN:  out = x + dropout(f(LN(x)))
//   post-LN: out = LN(x + dropout(f(x)))
// f is the attention or the feed-forward, given as callbacks so the same code serves every layer kind.
#include <functional>
#include <string>

#include "nn/dropout.h"
#include "nn/layernorm.h"
#include "qkv/options.h"

namespace qkv::nn {

class Residual {
 public:
  // f(out, in): the sublayer's forward, out (rows, C) overwritten.
  using Forward = std::function<void(Span, CSpan)>;
  // fb(d_in, d_out, in): the sublayer's backward, d_in (rows, C) overwritten.
  using Backward = std::function<void(Span, CSpan, CSpan)>;

  Residual(Parameters& params, const std::string& norm_name, int C, NormPosition order);
  void plan(Workspace& ws, int rows);
  void forward(Span out, CSpan x, int rows, const Dropout& drop, const Forward& f);
  // dx (rows, C) is overwritten; dx must not alias dout.
  void backward(Span dx, CSpan dout, CSpan x, int rows, const Dropout& drop, const Backward& fb);

 private:
  int C_;
  NormPosition order_;
  uint64_t stream_;
  LayerNorm norm_;
  Span n_;        // pre: LN(x), the sublayer's input; post: x + dropout(f(x)), the LN's input
  Span fo_;       // f's output
  Span dn_, ds_;  // backward scratch
};

}  // namespace qkv::nn
