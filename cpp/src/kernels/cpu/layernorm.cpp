// LayerNorm over the last dimension, optionally fused with the residual add that produces its input.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html
//   [r = x + f]  mean = sum(r)/C, var = sum((r-mean)^2)/C (biased, two passes over the row: no cancellation
//   when the mean is large), rstd = 1/sqrt(var + 1e-5), y = (r - mean) * rstd * w + b
// Backward with xhat = (x-mean)*rstd and g = dy*w:
//   dx = dr + rstd * (g - mean(g) - xhat * mean(g*xhat)),  dw += sum_rows dy*xhat,  db += sum_rows dy
// The row stays in L1 between its passes, so the fused kernel reads x and f once from memory and writes r
// and y once. The public entries split rows across threads; the row bodies are the active instruction
// set's (rowwise_simd.h) or the scalar references below.
#include <algorithm>
#include <cmath>
#include <vector>

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

// Rows in blocks of kRowBlock, each block's dw/db summed into its own slot of a scratch buffer, the slots
// then added in block order: one pass over the data, and the same sums whatever the thread count.
constexpr int kRowBlock = 32;

void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                        int rows, int C) {
  const LayerNormBackwardArgs a{
      dx.data(), dr.empty() ? nullptr : dr.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), C};
  const auto body = rowwise_kernels().layernorm_backward;
  const int blocks = (rows + kRowBlock - 1) / kRowBlock;
  if (blocks <= 1 || static_cast<int64_t>(rows) * C < kParallelMinFloats) {
    body(a, 0, rows, dw.data(), db.data());
    return;
  }
  thread_local std::vector<float> scratch;  // the calling thread's; grows once, reused every step
  scratch.assign(static_cast<size_t>(blocks) * 2 * C, 0.f);
  float* const partial = scratch.data();  // (a lambda would see each worker's own thread_local)
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      float* p = partial + static_cast<size_t>(blk) * 2 * C;
      const int r0 = static_cast<int>(blk) * kRowBlock;
      body(a, r0, std::min(rows, r0 + kRowBlock), p, p + C);
    }
  });
  for (int blk = 0; blk < blocks; ++blk) {
    const float* p = partial + static_cast<size_t>(blk) * 2 * C;
    for (int i = 0; i < C; ++i) {
      dw[i] += p[i];
      db[i] += p[C + i];
    }
  }
}

}  // namespace qkv::kernels
