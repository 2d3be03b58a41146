// LayerNorm over the last dimension. reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html
//   mean = sum(x)/C, var = sum((x-mean)^2)/C (biased), rstd = 1/sqrt(var + 1e-5)
//   y = (x - mean) * rstd * w + b
// Backward with xhat = (x-mean)*rstd and g = dy*w:
//   dx = rstd * (g - mean(g) - xhat * mean(g*xhat)),  dw += sum_rows dy*xhat,  db += sum_rows dy
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.data() + r * C;
      float* yr = y.data() + r * C;
      float m = 0.f;
      for (int i = 0; i < C; ++i) m += xr[i];
      m /= static_cast<float>(C);
      float v = 0.f;
      for (int i = 0; i < C; ++i) v += (xr[i] - m) * (xr[i] - m);
      v /= static_cast<float>(C);
      const float s = 1.f / std::sqrt(v + kLayerNormEps);
      for (int i = 0; i < C; ++i) yr[i] = (xr[i] - m) * s * w[i] + b[i];
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

void layernorm_backward(Span dx, Span dw, Span db, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd, int rows,
                        int C) {
  // dx rows are independent: threaded. dw/db sum over rows: one pass, on the calling thread, so the
  // accumulation order (and so the result) does not depend on the thread count.
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.data() + r * C;
      const float* dyr = dy.data() + r * C;
      float* dxr = dx.data() + r * C;
      const float m = mean[r], s = rstd[r];
      float mean_g = 0.f, mean_gx = 0.f;
      for (int i = 0; i < C; ++i) {
        const float g = dyr[i] * w[i];
        mean_g += g;
        mean_gx += g * (xr[i] - m) * s;
      }
      mean_g /= static_cast<float>(C);
      mean_gx /= static_cast<float>(C);
      for (int i = 0; i < C; ++i) {
        const float xhat = (xr[i] - m) * s;
        dxr[i] += s * (dyr[i] * w[i] - mean_g - xhat * mean_gx);
      }
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * C;
    const float* dyr = dy.data() + r * C;
    const float m = mean[r], s = rstd[r];
    for (int i = 0; i < C; ++i) {
      dw[i] += dyr[i] * (xr[i] - m) * s;
      db[i] += dyr[i];
    }
  }
}

}  // namespace qkv::kernels
