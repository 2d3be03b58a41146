#include "nn/linear.h"

#include "kernels/kernels.h"

namespace qkv::nn {

Linear::Linear(Parameters& params, const std::string& weight_name, const std::string& bias_name, int in, int out,
               float init_std)
    : in_(in),
      out_(out),
      w_(params.add(weight_name, {out, in}, Init::Normal, init_std)),
      b_(bias_name.empty() ? nullptr : &params.add(bias_name, {out}, Init::Zeros)) {}

void Linear::forward(Span y, CSpan x, int rows) const {
  kernels::gemm(false, true, rows, out_, in_, 1.f, x.data(), in_, w_.value.data(), in_, 0.f, y.data(), out_);
  if (b_) {
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out_; ++o) y[static_cast<size_t>(r) * out_ + o] += b_->value[o];
  }
}

void Linear::backward(Span dx, CSpan dy, CSpan x, int rows) {
  // dW (out, in) += dy^T (out, rows) x (rows, in)
  kernels::gemm(true, false, out_, in_, rows, 1.f, dy.data(), out_, x.data(), in_, 1.f, w_.grad.data(), in_);
  if (b_) {
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out_; ++o) b_->grad[o] += dy[static_cast<size_t>(r) * out_ + o];
  }
  // dx (rows, in) = dy (rows, out) W (out, in)
  if (!dx.empty())
    kernels::gemm(false, false, rows, in_, out_, 1.f, dy.data(), out_, w_.value.data(), in_, 0.f, dx.data(), in_);
}

}  // namespace qkv::nn
