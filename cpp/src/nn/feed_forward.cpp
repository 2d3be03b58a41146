#include "nn/feed_forward.h"

#include "kernels/kernels.h"

namespace qkv::nn {

FeedForward::FeedForward(Parameters& params, const std::string& prefix, int C, int F, float init_std,
                         float out_init_std)
    : F_(F),
      linear1_(params, prefix + "linear1.weight", prefix + "linear1.bias", C, F, init_std),
      linear2_(params, prefix + "linear2.weight", prefix + "linear2.bias", F, C, out_init_std) {}

void FeedForward::plan(Workspace& ws, int rows) {
  const size_t n = static_cast<size_t>(rows) * F_;
  h_ = ws.take(n);
  a_ = ws.take(n);
  da_ = ws.take(n);
}

void FeedForward::forward(Span y, CSpan x, int rows) {
  const size_t n = static_cast<size_t>(rows) * F_;
  linear1_.forward(h_, x, rows);
  kernels::gelu_forward(a_.first(n), h_.first(n));
  linear2_.forward(y, a_, rows);
}

void FeedForward::backward(Span dx, CSpan dy, CSpan x, int rows) {
  const size_t n = static_cast<size_t>(rows) * F_;
  linear2_.backward(da_, dy, a_, rows);
  kernels::gelu_backward(da_.first(n), da_.first(n), h_.first(n));  // in place: elementwise
  linear1_.backward(dx, da_, x, rows);
}

}  // namespace qkv::nn
