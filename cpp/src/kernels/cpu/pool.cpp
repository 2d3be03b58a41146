// Mean pooling over the non-padding positions of each sequence (the classifier's Pooling::Mean).
// Legend: B batch, T sequence, C channels.
#include <algorithm>

#include "kernels/kernels.h"

namespace qkv::kernels {
namespace {

int count_tokens(const uint8_t* key_pad, int b, int T) {
  int n = 0;
  for (int t = 0; t < T; ++t) n += key_pad[static_cast<size_t>(b) * T + t] == 0;
  return n;
}

}  // namespace

// out[b] = sum_{t not padding} x[b, t] / count, summed in t order.
void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    float* p = out.data() + static_cast<size_t>(b) * C;
    const float* row = x.data() + static_cast<size_t>(b) * T * C;
    std::fill_n(p, C, 0.f);
    const int n = count_tokens(key_pad, b, T);
    for (int t = 0; t < T; ++t)
      if (!key_pad[static_cast<size_t>(b) * T + t])
        for (int i = 0; i < C; ++i) p[i] += row[static_cast<size_t>(t) * C + i];
    const float inv = n ? 1.f / static_cast<float>(n) : 0.f;
    for (int i = 0; i < C; ++i) p[i] *= inv;
  }
}

// dx[b, t] = dout[b] / count where t is not padding, else 0.
void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    const float* dp = dout.data() + static_cast<size_t>(b) * C;
    float* row = dx.data() + static_cast<size_t>(b) * T * C;
    const int n = count_tokens(key_pad, b, T);
    const float inv = n ? 1.f / static_cast<float>(n) : 0.f;
    for (int t = 0; t < T; ++t) {
      float* d = row + static_cast<size_t>(t) * C;
      if (key_pad[static_cast<size_t>(b) * T + t])
        std::fill_n(d, C, 0.f);
      else
        for (int i = 0; i < C; ++i) d[i] = dp[i] * inv;
    }
  }
}

}  // namespace qkv::kernels
