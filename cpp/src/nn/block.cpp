#include "nn/block.h"

#include <algorithm>

namespace qkv::nn {

Block::Block(Parameters& params, const std::string& prefix, int C, int H, int F, float init_std, float out_init_std)
    : C_(C),
      ln1_(params, prefix + "norm1", C),
      attn_(params, prefix + "self_attn", C, H, init_std, out_init_std),
      ln2_(params, prefix + "norm2", C),
      ffn_(params, prefix, C, F, init_std, out_init_std) {}

void Block::plan(Workspace& ws, int B, int T) {
  const int rows = B * T;
  const size_t n = static_cast<size_t>(rows) * C_;
  ln1_.plan(ws, rows);
  attn_.plan(ws, B, T);
  ln2_.plan(ws, rows);
  ffn_.plan(ws, rows);
  ln1_out_ = ws.take(n);
  x1_ = ws.take(n);
  ln2_out_ = ws.take(n);
  d_ln_out_ = ws.take(n);
  dx1_ = ws.take(n);
}

void Block::forward(Span y, CSpan x, int B, int T) {
  const int rows = B * T;
  const size_t n = static_cast<size_t>(rows) * C_;
  ln1_.forward(ln1_out_, x, rows);
  attn_.forward(x1_, ln1_out_, B, T);
  for (size_t i = 0; i < n; ++i) x1_[i] += x[i];
  ln2_.forward(ln2_out_, x1_, rows);
  ffn_.forward(y, ln2_out_, rows);
  for (size_t i = 0; i < n; ++i) y[i] += x1_[i];
}

void Block::backward(Span dx, CSpan dy, CSpan x, int B, int T) {
  const int rows = B * T;
  const size_t n = static_cast<size_t>(rows) * C_;
  // dx1 = dy (the residual path) + ln2's backward of the FFN's input gradient.
  ffn_.backward(d_ln_out_, dy, ln2_out_, rows);
  std::copy_n(dy.begin(), n, dx1_.begin());
  ln2_.backward(dx1_, d_ln_out_, x1_, rows);
  // dx = dx1 (the residual path) + ln1's backward of the attention's input gradient.
  attn_.backward(d_ln_out_, dx1_, ln1_out_, B, T);
  std::copy_n(dx1_.begin(), n, dx.begin());
  ln1_.backward(dx, d_ln_out_, x, rows);
}

}  // namespace qkv::nn
