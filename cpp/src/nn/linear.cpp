#include "nn/linear.h"

#include "nn/weight_product.h"

namespace qkv::nn {

Linear::Linear(Parameters& params, const std::string& weight_name, const std::string& bias_name, int in, int out,
               float init_std)
    : params_(params),
      in_(in),
      out_(out),
      w_(params.add(weight_name, {out, in}, Init::Normal, init_std)),
      b_(bias_name.empty() ? nullptr : &params.add(bias_name, {out}, Init::Zeros)) {
  w_.matrix = true;
}

void Linear::plan(Workspace& ws, int rows) {
  scratch_ = ws.take_shared("bias_act.scratch", ops().bias_act_backward_scratch_size(rows, out_));
}

void Linear::forward(Span y, CSpan x, int rows) const { forward(y, y, x, rows, ops::Act::Identity); }

void Linear::forward(Span y, Span h, CSpan x, int rows, ops::Act act) const {
  const CSpan b = b_ ? CSpan(b_->value) : CSpan();
  if (!w_.is_packed()) return ops().linear_forward(y, h, x, w_.value, b, act, rows, in_, out_);
  // A packed weight: its product into h, then the bias and activation as linear_forward's default does.
  weight_product(ops(), w_, 0, out_, x.data(), in_, rows, h.data(), out_);
  if (!b.empty() || act != ops::Act::Identity || y.data() != h.data()) ops().bias_act_forward(y, h, b, act, rows, out_);
}

void Linear::backward(Span dx, CSpan dy, CSpan x, int rows) {
  if (b_) ops().bias_act_backward({}, b_->grad, dy, {}, ops::Act::Identity, rows, out_, scratch_);
  products_backward(dx, dy, x, rows);
}

void Linear::backward(Span dx, Span dy, CSpan h, CSpan x, int rows, ops::Act act) {
  ops().bias_act_backward(dy, b_ ? b_->grad : Span(), dy, h, act, rows, out_, scratch_);
  products_backward(dx, dy, x, rows);
}

void Linear::products_backward(Span dx, CSpan dy, CSpan x, int rows) {
  // dW (out, in) += dy^T (out, rows) x (rows, in)
  ops().gemm(true, false, out_, in_, rows, 1.f, dy.data(), out_, x.data(), in_, 1.f, w_.grad.data(), in_);
  // dx (rows, in) = dy (rows, out) W (out, in)
  if (!dx.empty())
    ops().gemm(false, false, rows, in_, out_, 1.f, dy.data(), out_, w_.value.data(), in_, 0.f, dx.data(), in_);
}

}  // namespace qkv::nn
