#include "nn/feed_forward.h"

namespace qkv::nn {

FeedForward::FeedForward(Parameters& params, const std::string& prefix, int C, int F, Activation activation, bool bias,
                         float init_std, float out_init_std)
    : params_(params),
      F_(F),
      act_(activation == Activation::GELU       ? ops::Act::GELU
           : activation == Activation::GELUTanh ? ops::Act::GELUTanh
                                                : ops::Act::ReLU),
      stream_(params.new_stream()),
      linear1_(params, prefix + "linear1.weight", bias ? prefix + "linear1.bias" : "", C, F, init_std, "up"),
      linear2_(params, prefix + "linear2.weight", bias ? prefix + "linear2.bias" : "", F, C, out_init_std, "down") {}

void FeedForward::plan(Workspace& ws, int rows, const Saved& saved) {
  const size_t n = static_cast<size_t>(rows) * F_;
  // ReLU's derivative reads the sign of its output (a > 0 exactly where h > 0, and dropout's zeros carry no
  // gradient either way), so with ReLU the pre-activation is scratch of the forward call and only a_ stays
  // per layer; GELU's derivative (either form) needs h.
  linear1_.plan(ws, rows, saved / "up");
  linear2_.plan(ws, rows, saved / "down");
  const bool relu = act_ == ops::Act::ReLU;
  h_ = relu ? ws.take_shared("ffn.h", n) : saved.take(ws, "h", n);
  a_ = saved.take(ws, "a", n);
  // da is written over a buffer the backward is done with by then, no (rows, F) of its own: with ReLU the forward's
  // scratch h; else a, which linear2's backward reads (its input, for dW and its adapter's dA) before it writes
  // da over it (nn/linear.h), while GELU's derivative reads h. GPT-2 124M at 8 x 128 rows: 12 MiB.
  da_ = relu ? h_ : a_;
  spare_floats_ = n;
}

void FeedForward::forward(Span y, CSpan x, int rows, const Dropout& drop) {
  const size_t n = static_cast<size_t>(rows) * F_;
  linear1_.forward(a_, h_, x, rows, act_, drop);  // bias and activation in one pass
  if (drop.active()) ops().dropout_forward(a_.first(n), a_.first(n), drop.p, drop.seed_for(stream_));
  linear2_.forward(y, a_, rows, drop);
}

void FeedForward::backward(Span dx, CSpan dy, CSpan x, int rows, const Dropout& drop) {
  const size_t n = static_cast<size_t>(rows) * F_;
  linear2_.backward(da_, dy, a_, rows);
  if (drop.active()) ops().dropout_backward(da_.first(n), da_.first(n), drop.p, drop.seed_for(stream_));
  // The activation's gradient and db in one pass, in place in da_, then linear1's products.
  linear1_.backward(dx, da_, act_ == ops::Act::ReLU ? a_ : h_, x, rows, act_);
}

}  // namespace qkv::nn
