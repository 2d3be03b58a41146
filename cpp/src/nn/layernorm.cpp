#include "nn/layernorm.h"

namespace qkv::nn {

LayerNorm::LayerNorm(Parameters& params, const std::string& prefix, int C)
    : params_(params),
      C_(C),
      w_(params.add(prefix + ".weight", {C}, Init::Ones)),
      b_(params.add(prefix + ".bias", {C}, Init::Zeros)) {}

void LayerNorm::plan(Workspace& ws, int rows) {
  mean_ = ws.take(static_cast<size_t>(rows));
  rstd_ = ws.take(static_cast<size_t>(rows));
  scratch_ = ws.take_shared("layernorm.scratch", ops().layernorm_backward_scratch_size(rows, C_));
  frozen_grads_ = ws.take_shared("layernorm.frozen_grads", params_.frozen() ? 2 * static_cast<size_t>(C_) : 0);
}

void LayerNorm::forward(Span y, CSpan x, int rows) {
  ops().layernorm_forward(y, mean_, rstd_, x, w_.value, b_.value, rows, C_);
}

void LayerNorm::forward_residual(Span r, Span y, CSpan x, CSpan f, int rows) {
  ops().residual_layernorm_forward(r, y, mean_, rstd_, x, f, w_.value, b_.value, rows, C_);
}

void LayerNorm::backward(Span dx, CSpan dr, CSpan dy, CSpan x, int rows) {
  if (params_.frozen()) {
    const Span g = frozen_grads_.first(2 * static_cast<size_t>(C_));
    return ops().layernorm_backward(dx, g.first(C_), g.subspan(C_), dr, dy, x, w_.value, mean_, rstd_, rows, C_,
                                    scratch_);
  }
  ops().layernorm_backward(dx, w_.grad, b_.grad, dr, dy, x, w_.value, mean_, rstd_, rows, C_, scratch_);
}

}  // namespace qkv::nn
