#include "nn/feed_forward.h"

#include "kernels/kernels.h"

namespace qkv::nn {

FeedForward::FeedForward(Parameters& params, const std::string& prefix, int C, int F, Activation activation, bool bias,
                         float init_std, float out_init_std)
    : F_(F),
      activation_(activation),
      stream_(params.new_stream()),
      linear1_(params, prefix + "linear1.weight", bias ? prefix + "linear1.bias" : "", C, F, init_std),
      linear2_(params, prefix + "linear2.weight", bias ? prefix + "linear2.bias" : "", F, C, out_init_std) {}

void FeedForward::plan(Workspace& ws, int rows) {
  const size_t n = static_cast<size_t>(rows) * F_;
  h_ = ws.take(n);
  a_ = ws.take(n);
  da_ = ws.take(n);
}

void FeedForward::forward(Span y, CSpan x, int rows, const Dropout& drop) {
  const size_t n = static_cast<size_t>(rows) * F_;
  linear1_.forward(h_, x, rows);
  if (activation_ == Activation::GELU)
    kernels::gelu_forward(a_.first(n), h_.first(n));
  else
    kernels::relu_forward(a_.first(n), h_.first(n));
  if (drop.active()) kernels::dropout_forward(a_.first(n), a_.first(n), drop.p, drop.seed_for(stream_));
  linear2_.forward(y, a_, rows);
}

void FeedForward::backward(Span dx, CSpan dy, CSpan x, int rows, const Dropout& drop) {
  const size_t n = static_cast<size_t>(rows) * F_;
  linear2_.backward(da_, dy, a_, rows);
  // In place from here on: every step is elementwise.
  if (drop.active()) kernels::dropout_backward(da_.first(n), da_.first(n), drop.p, drop.seed_for(stream_));
  if (activation_ == Activation::GELU)
    kernels::gelu_backward(da_.first(n), da_.first(n), h_.first(n));
  else
    kernels::relu_backward(da_.first(n), da_.first(n), h_.first(n));
  linear1_.backward(dx, da_, x, rows);
}

}  // namespace qkv::nn
