#include "nn/linear.h"

#include "nn/weight_product.h"

namespace qkv::nn {

namespace {
// "x.weight" -> "x": the adapter's name stem (qkv/model.h: lora_parameters).
std::string stem_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.ends_with(suffix))
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}
}  // namespace

Linear::Linear(Parameters& params, const std::string& weight_name, const std::string& bias_name, int in, int out,
               float init_std, const char* lora_target)
    : params_(params),
      in_(in),
      out_(out),
      w_(params.add(weight_name, {out, in}, Init::Normal, init_std)),
      b_(bias_name.empty() ? nullptr : &params.add(bias_name, {out}, Init::Zeros)),
      site_(lora_target ? &params.add_lora_site(stem_of(weight_name), lora_target, in, out, w_) : nullptr) {
  w_.matrix = true;
}

void Linear::plan(Workspace& ws, int rows, const Saved& saved) {
  scratch_ = ws.take_shared("bias_act.scratch", ops().bias_act_backward_scratch_size(rows, out_));
  dequant_ = ws.take_shared("weight.dequant", params_.frozen() ? weight_dx_scratch_size(w_) : 0);
  if (LoraAdapter* a = adapter()) a->plan(ws, rows, 0, saved);
}

void Linear::forward(Span y, CSpan x, int rows, const Dropout& drop) {
  forward(y, y, x, rows, ops::Act::Identity, drop);
}

void Linear::forward(Span y, Span h, CSpan x, int rows, ops::Act act, const Dropout& drop) {
  const CSpan b = b_ ? CSpan(b_->value) : CSpan();
  LoraAdapter* const a = adapter();
  if (!a) return weight_linear_forward(ops(), w_, y, h, x, b, act, rows);
  // An adapter: the product into h (plus the adapter's), then the bias and activation as linear_forward's default
  // does.
  weight_product(ops(), w_, 0, out_, x.data(), in_, rows, h.data(), out_);
  drop_ = drop;
  a->forward(ops(), 0, 0, out_, x.data(), in_, rows, h.data(), out_, drop);
  if (!b.empty() || act != ops::Act::Identity || y.data() != h.data()) ops().bias_act_forward(y, h, b, act, rows, out_);
}

void Linear::backward(Span dx, CSpan dy, CSpan x, int rows) {
  if (b_ && !params_.frozen()) ops().bias_act_backward({}, b_->grad, dy, {}, ops::Act::Identity, rows, out_, scratch_);
  products_backward(dx, dy, x, rows);
}

void Linear::backward(Span dx, Span dy, CSpan h, CSpan x, int rows, ops::Act act) {
  ops().bias_act_backward(dy, b_ && !params_.frozen() ? b_->grad : Span(), dy, h, act, rows, out_, scratch_);
  products_backward(dx, dy, x, rows);
}

void Linear::products_backward(Span dx, CSpan dy, CSpan x, int rows) {
  // dW (out, in) += dy^T (out, rows) x (rows, in)
  if (!params_.frozen())
    ops().gemm(true, false, out_, in_, rows, 1.f, dy.data(), out_, x.data(), in_, 1.f, w_.grad.data(), in_);
  // The adapter's gradients before dx: they are the last to read x, whose buffer dx may be (nn/linear.h).
  LoraAdapter* const a = adapter();
  if (a) a->backward_params(ops(), 0, 0, out_, dy.data(), out_, x.data(), rows, drop_);
  if (dx.empty()) return;
  // dx (rows, in) = dy (rows, out) W (out, in), then the adapter's part
  weight_product_dx(ops(), w_, 0, out_, dy.data(), out_, rows, dx.data(), in_, 0.f, dequant_);
  if (a) a->backward_input(ops(), rows, dx.data(), drop_);
}

}  // namespace qkv::nn
