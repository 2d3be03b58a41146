// LayerNorm over the last dimension, optionally fused with the residual add that produces its input.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html
//   [r = x + f]  mean = sum(r)/C, var = sum((r-mean)^2)/C (biased, two passes over the row: no cancellation
//   when the mean is large), rstd = 1/sqrt(var + 1e-5), y = (r - mean) * rstd * w + b
// Backward with xhat = (x-mean)*rstd and g = dy*w:
//   dx = dr + rstd * (g - mean(g) - xhat * mean(g*xhat)),  dw += sum_rows dy*xhat,  db += sum_rows dy
// The row stays in L1 between its passes, so the fused kernel reads x and f once from memory and writes r
// and y once. The public entries split rows across threads; the row bodies are the active instruction
// set's (rowwise_simd.h) or the scalar references below.
#include <cmath>

#include "kernels/cpu/rowwise.h"

namespace qkv::kernels {

void layernorm_rows_reference(const LayerNormArgs& a, int r0, int r1) {
  const int C = a.C;
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * C;
    const float* xr = a.x + o;
    if (a.f) {
      for (int i = 0; i < C; ++i) a.r[o + i] = a.x[o + i] + a.f[o + i];
      xr = a.r + o;
    }
    float m = 0.f;
    for (int i = 0; i < C; ++i) m += xr[i];
    m /= static_cast<float>(C);
    float v = 0.f;
    for (int i = 0; i < C; ++i) v += (xr[i] - m) * (xr[i] - m);
    v /= static_cast<float>(C);
    const float s = 1.f / std::sqrt(v + kLayerNormEps);
    for (int i = 0; i < C; ++i) a.y[o + i] = (xr[i] - m) * s * a.w[i] + a.b[i];
    a.mean[row] = m;
    a.rstd[row] = s;
  }
}

void layernorm_backward_rows_reference(const LayerNormBackwardArgs& a, int r0, int r1, float* dw, float* db) {
  const int C = a.C;
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * C;
    const float *xr = a.x + o, *dyr = a.dy + o;
    const float m = a.mean[row], s = a.rstd[row];
    float mean_g = 0.f, mean_gx = 0.f;
    for (int i = 0; i < C; ++i) {
      const float g = dyr[i] * a.w[i];
      mean_g += g;
      mean_gx += g * (xr[i] - m) * s;
    }
    mean_g /= static_cast<float>(C);
    mean_gx /= static_cast<float>(C);
    for (int i = 0; i < C; ++i) {
      const float xhat = (xr[i] - m) * s;
      const float d = s * (dyr[i] * a.w[i] - mean_g - xhat * mean_gx);
      a.dx[o + i] = (a.dr ? a.dr[o + i] : 0.f) + d;
      dw[i] += dyr[i] * xhat;
      db[i] += dyr[i];
    }
  }
}

namespace {

void forward(const LayerNormArgs& a, int rows) {
  const auto body = rowwise_kernels().layernorm;
  for_rows(rows, a.C, [&](int r0, int r1) { body(a, r0, r1); });
}

}  // namespace

void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) {
  forward({y.data(), mean.data(), rstd.data(), nullptr, x.data(), nullptr, w.data(), b.data(), C}, rows);
}

void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b, int rows,
                                int C) {
  forward({y.data(), mean.data(), rstd.data(), r.data(), x.data(), f.data(), w.data(), b.data(), C}, rows);
}

void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                        int rows, int C) {
  const LayerNormBackwardArgs a{
      dx.data(), dr.empty() ? nullptr : dr.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), C};
  const auto body = rowwise_kernels().layernorm_backward;
  sum_in_row_blocks(
      rows, C, 2 * static_cast<size_t>(C), [&](int r0, int r1, float* slot) { body(a, r0, r1, slot, slot + C); },
      [&](const float* slot) {
        for (int i = 0; i < C; ++i) {
          dw[i] += slot[i];
          db[i] += slot[C + i];
        }
      });
}

}  // namespace qkv::kernels
