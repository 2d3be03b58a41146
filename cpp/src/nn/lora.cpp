#include "nn/lora.h"

#include <algorithm>

#include "qkv/error.h"

namespace qkv::nn {

void LoraAdapter::plan(Workspace& ws, int rows0, int rows1, const Saved& saved) {
  const int rows = std::max(rows0, rows1);
  t_[0] = saved.take(ws, "lora_t0", static_cast<size_t>(rows0) * rank);
  t_[1] = saved.take(ws, "lora_t1", static_cast<size_t>(rows1) * rank);
  // Live only inside one adapter's call: every adapter of the model shares them.
  xd_ = ws.take_shared("lora.xd", p > 0.f ? static_cast<size_t>(rows) * in : 0);
  dxd_ = ws.take_shared("lora.dxd", p > 0.f ? static_cast<size_t>(rows) * in : 0);
  dt_ = ws.take_shared("lora.dt", static_cast<size_t>(rows) * rank);
}

const float* LoraAdapter::dropped(ops::Backend& ops, const float* x, int rows, const Dropout& drop) {
  if (!dropping(drop)) return x;
  const size_t n = static_cast<size_t>(rows) * in;
  ops.dropout_forward(xd_.first(n), {x, n}, p, drop.seed_for(stream));
  return xd_.data();
}

void LoraAdapter::forward(ops::Backend& ops, int slot, int n0, int n, const float* x, int ldx, int rows, float* y,
                          int ldy, const Dropout& drop) {
  check(!dropping(drop) || ldx == in, "LoRA: a training pass with adapter dropout needs a contiguous input");
  const float* xd = dropped(ops, x, rows, drop);
  const int r = rank;
  float* t = t_[slot].data();
  // t (rows, r) = xd A^T;  y (rows, n) += s t B_n^T
  ops.gemm(false, true, rows, r, in, 1.f, xd, xd == x ? ldx : in, a->value.data(), in, 0.f, t, r);
  ops.gemm(false, true, rows, n, r, scale, t, r, b->value.data() + static_cast<size_t>(n0) * r, r, 1.f, y, ldy);
}

void LoraAdapter::backward_params(ops::Backend& ops, int slot, int n0, int n, const float* dy, int lddy, const float* x,
                                  int rows, const Dropout& drop) {
  const int r = rank;
  const float* t = t_[slot].data();
  float* dt = dt_.data();
  // dB_n (n, r) += s dy^T t;  dt (rows, r) = s dy B_n
  ops.gemm(true, false, n, r, rows, scale, dy, lddy, t, r, 1.f, b->grad.data() + static_cast<size_t>(n0) * r, r);
  ops.gemm(false, false, rows, r, n, scale, dy, lddy, b->value.data() + static_cast<size_t>(n0) * r, r, 0.f, dt, r);
  // dA (r, in) += dt^T xd
  const float* xd = dropped(ops, x, rows, drop);
  ops.gemm(true, false, r, in, rows, 1.f, dt, r, xd, in, 1.f, a->grad.data(), in);
}

void LoraAdapter::backward_input(ops::Backend& ops, int rows, float* dx, const Dropout& drop) {
  const int r = rank;
  const float* dt = dt_.data();
  if (!dropping(drop)) {
    // dx (rows, in) += dt A
    ops.gemm(false, false, rows, in, r, 1.f, dt, r, a->value.data(), in, 1.f, dx, in);
    return;
  }
  // dxd = dt A, through the mask, added to dx.
  const size_t m = static_cast<size_t>(rows) * in;
  const Span dxd = dxd_.first(m);
  ops.gemm(false, false, rows, in, r, 1.f, dt, r, a->value.data(), in, 0.f, dxd.data(), in);
  ops.dropout_backward(dxd, dxd, p, drop.seed_for(stream));
  ops.add({dx, m}, {dx, m}, dxd);
}

}  // namespace qkv::nn
