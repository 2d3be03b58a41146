#pragma once
// One residual sublayer with its LayerNorm, in either order, and dropout on the sublayer's output:
//   pre-LN:  out = x + dropout(f(LN(x)))
//   post-LN: out = LN(x + dropout(f(x)))      the add and the norm run as one fused pass
// f is the attention or the feed-forward, given as callbacks so the same code serves every layer kind.
//
// Pre-LN sublayers in a stack chain: the add that ends one sublayer runs fused with the LayerNorm that
// starts the next (or the stack's final norm), so each residual sum is normalised in the pass that makes it.
// The caller says so with `x_normed` (LN(x) is already in input_norm().y) and `next` (where out goes next).
#include <functional>
#include <string>

#include "nn/dropout.h"
#include "nn/layernorm.h"
#include "nn/saved.h"
#include "qkv/options.h"

namespace qkv::nn {

class Residual {
 public:
  // f(out, in): the sublayer's forward, out (rows, C) overwritten.
  using Forward = std::function<void(Span, CSpan)>;
  // fb(d_in, d_out, in): the sublayer's backward, d_in (rows, C) overwritten.
  using Backward = std::function<void(Span, CSpan, CSpan)>;

  // dropout: the model's dropout can be on; without it a pre-LN block's backward needs no scratch for dropout's.
  Residual(Parameters& params, const std::string& norm_name, int C, NormPosition order, bool dropout = true);
  // saved: where the norm's side (n below) goes (nn/saved.h).
  // dn: where the sublayer's backward writes d LN(x) (post-LN: d x through f), (rows, C): a caller's buffer free
  // during this block's backward (its spans empty in the plan's counting pass, as every plan's are), or, when null,
  // scratch every residual block of the model shares.
  void plan(Workspace& ws, int rows, const Saved& saved = {}, const Span* dn = nullptr);
  // x, out: (rows, C). Pre-LN only: x_normed says input_norm().y already holds LN(x) (the previous sublayer's
  // `next` wrote it); next, when it has a norm, gets LN(out) in the same pass as the add. Post-LN ignores both.
  void forward(Span out, CSpan x, int rows, const Dropout& drop, const Forward& f, bool x_normed = false,
               const NormInto& next = {});
  // dx (rows, C) is overwritten; dx must not alias dout.
  void backward(Span dx, CSpan dout, CSpan x, int rows, const Dropout& drop, const Backward& fb);

  // Pre-LN: this sublayer's LayerNorm and the buffer for LN(x), the previous sublayer's `next`. Post-LN: none.
  NormInto input_norm() { return order_ == NormPosition::Pre ? NormInto{&norm_, n_} : NormInto{}; }

 private:
  ops::Backend& ops() const { return params_.ops(); }

  const Parameters& params_;
  int C_;
  NormPosition order_;
  bool dropout_;
  uint64_t stream_;
  LayerNorm norm_;
  Span n_;        // pre: LN(x), the sublayer's input; post: x + dropout(f(x)), the LN's input
  Span fo_;       // f's output
  Span dn_, ds_;  // backward scratch
};

}  // namespace qkv::nn
