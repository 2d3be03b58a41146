#include "nn/residual.h"

namespace qkv::nn {

Residual::Residual(Parameters& params, const std::string& norm_name, int C, NormPosition order, bool dropout)
    : params_(params),
      C_(C),
      order_(order),
      dropout_(dropout),
      stream_(params.new_stream()),
      norm_(params, norm_name, C) {}

void Residual::plan(Workspace& ws, int rows, const Saved& saved, const Span* dn) {
  const size_t n = static_cast<size_t>(rows) * C_;
  norm_.plan(ws, rows);
  n_ = saved.take(ws, "n", n);
  // f's output is consumed by the add inside forward(), and the backward's buffers live inside one call:
  // every residual block of the model shares them.
  fo_ = ws.take_shared("residual.fo", n);
  dn_ = dn ? *dn : ws.take_shared("residual.dn", n);
  // ds: post-LN, LN'(dout), always; pre-LN, dropout's gradient only (none when the model's p is 0).
  ds_ = ws.take_shared("residual.ds", order_ == NormPosition::Pre && !dropout_ ? 0 : n);
}

void Residual::forward(Span out, CSpan x, int rows, const Dropout& drop, const Forward& f, bool x_normed,
                       const NormInto& next) {
  const size_t n = static_cast<size_t>(rows) * C_;
  const Span fo = fo_.first(n);
  if (order_ == NormPosition::Pre) {
    if (!x_normed) norm_.forward(n_, x, rows);
    f(fo, n_);
    if (drop.active()) ops().dropout_forward(fo, fo, drop.p, drop.seed_for(stream_));
    if (next.norm)
      next.norm->forward_residual(out, next.y, x, fo, rows);
    else
      ops().add(out.first(n), x, fo);
  } else {
    f(fo, x);
    if (drop.active()) ops().dropout_forward(fo, fo, drop.p, drop.seed_for(stream_));
    norm_.forward_residual(n_, out, x, fo, rows);
  }
}

void Residual::backward(Span dx, CSpan dout, CSpan x, int rows, const Dropout& drop, const Backward& fb) {
  const size_t n = static_cast<size_t>(rows) * C_;
  const Span ds = ds_.first(n);
  if (order_ == NormPosition::Pre) {
    // d fo = dropout'(dout); d LN(x) = fb(d fo); dx = dout + LN'(d LN(x)), the add fused into the norm's pass
    CSpan dfo = dout.first(n);
    if (drop.active()) {
      ops().dropout_backward(ds, dfo, drop.p, drop.seed_for(stream_));
      dfo = ds;
    }
    fb(dn_, dfo, n_);
    norm_.backward(dx, dout, dn_, x, rows);
  } else {
    // d s = LN'(dout); d fo = dropout'(d s); dx = d s + fb(d fo)
    norm_.backward(ds, {}, dout, n_, rows);
    CSpan dfo = ds;
    if (drop.active()) {
      const Span dropped = fo_.first(n);  // f's output is no longer needed: reuse its buffer
      ops().dropout_backward(dropped, ds, drop.p, drop.seed_for(stream_));
      dfo = dropped;
    }
    fb(dn_, dfo, x);
    ops().add(dx.first(n), ds, dn_);
  }
}

}  // namespace qkv::nn
