#include "nn/residual.h"

#include <algorithm>

#include "kernels/kernels.h"

namespace qkv::nn {

Residual::Residual(Parameters& params, const std::string& norm_name, int C, NormPosition order)
    : C_(C), order_(order), stream_(params.new_stream()), norm_(params, norm_name, C) {}

void Residual::plan(Workspace& ws, int rows) {
  const size_t n = static_cast<size_t>(rows) * C_;
  norm_.plan(ws, rows);
  n_ = ws.take(n);
  fo_ = ws.take(n);
  dn_ = ws.take(n);
  ds_ = ws.take(n);
}

void Residual::forward(Span out, CSpan x, int rows, const Dropout& drop, const Forward& f) {
  const size_t n = static_cast<size_t>(rows) * C_;
  const Span fo = fo_.first(n);
  if (order_ == NormPosition::Pre) {
    norm_.forward(n_, x, rows);
    f(fo, n_);
    if (drop.active()) kernels::dropout_forward(fo, fo, drop.p, drop.seed_for(stream_));
    for (size_t i = 0; i < n; ++i) out[i] = x[i] + fo[i];
  } else {
    f(fo, x);
    if (drop.active()) kernels::dropout_forward(fo, fo, drop.p, drop.seed_for(stream_));
    for (size_t i = 0; i < n; ++i) n_[i] = x[i] + fo[i];
    norm_.forward(out, n_, rows);
  }
}

void Residual::backward(Span dx, CSpan dout, CSpan x, int rows, const Dropout& drop, const Backward& fb) {
  const size_t n = static_cast<size_t>(rows) * C_;
  const Span ds = ds_.first(n);
  if (order_ == NormPosition::Pre) {
    // d fo = dropout'(dout); d LN(x) = fb(...); dx = dout + LN'(d LN(x))
    std::copy_n(dout.begin(), n, ds.begin());
    if (drop.active()) kernels::dropout_backward(ds, ds, drop.p, drop.seed_for(stream_));
    fb(dn_, ds, n_);
    std::copy_n(dout.begin(), n, dx.begin());
    norm_.backward(dx, dn_, x, rows);
  } else {
    // d s = LN'(dout); d fo = dropout'(d s); dx = d s + fb(d fo)
    std::fill(ds.begin(), ds.end(), 0.f);
    norm_.backward(ds, dout, n_, rows);
    const Span dfo = fo_.first(n);  // f's output is no longer needed: reuse its buffer
    std::copy_n(ds.begin(), n, dfo.begin());
    if (drop.active()) kernels::dropout_backward(dfo, dfo, drop.p, drop.seed_for(stream_));
    fb(dn_, dfo, x);
    for (size_t i = 0; i < n; ++i) dx[i] = ds[i] + dn_[i];
  }
}

}  // namespace qkv::nn
