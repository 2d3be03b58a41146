// Causal multi-head attention core, one (batch, head) pair per task.
//   S = q k^T / sqrt(hs)          (T,T), masked above the diagonal
//   P = softmax(S) row-wise        saved as att
//   out = P v                      (T,hs) into the head's columns of (B,T,C)
// Backward (dP from dout, then the softmax Jacobian, then the two products of S):
//   dP = dout v^T,   dv = P^T dout
//   dS = P * (dP - rowsum(dP * P)),  masked entries stay 0
//   dq = dS k / sqrt(hs),  dk = dS^T q / sqrt(hs)
// The full T x T matrix is materialised here; the fused (online-softmax) kernel is a later step.
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void attention_forward(Span out, Span att, CSpan qkv, int B, int T, int C, int H) {
  const int hs = C / H, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  parallel_for(static_cast<int64_t>(B) * H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / H), h = static_cast<int>(p % H);
      const float* q = qkv.data() + static_cast<size_t>(b) * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* P = att.data() + static_cast<size_t>(p) * T * T;
      gemm(false, true, T, T, hs, scale, q, C3, k, C3, 0.f, P, T);
      for (int t = 0; t < T; ++t) {
        float* row = P + static_cast<size_t>(t) * T;
        float mx = row[0];
        for (int s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
        float sum = 0.f;
        for (int s = 0; s <= t; ++s) {
          row[s] = std::exp(row[s] - mx);
          sum += row[s];
        }
        const float inv = 1.f / sum;
        for (int s = 0; s <= t; ++s) row[s] *= inv;
        for (int s = t + 1; s < T; ++s) row[s] = 0.f;
      }
      gemm(false, false, T, hs, T, 1.f, P, T, v, C3, 0.f, out.data() + static_cast<size_t>(b) * T * C + h * hs, C);
    }
  });
}

void attention_backward(Span dqkv, Span datt, CSpan dout, CSpan qkv, CSpan att, int B, int T, int C, int H) {
  const int hs = C / H, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  parallel_for(static_cast<int64_t>(B) * H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / H), h = static_cast<int>(p % H);
      const size_t off = static_cast<size_t>(b) * T * C3 + h * hs;
      const float *q = qkv.data() + off, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv.data() + off, *dk = dq + C, *dv = dq + 2 * C;
      const float* P = att.data() + static_cast<size_t>(p) * T * T;
      float* dP = datt.data() + static_cast<size_t>(p) * T * T;
      const float* dO = dout.data() + static_cast<size_t>(b) * T * C + h * hs;
      gemm(false, true, T, T, hs, 1.f, dO, C, v, C3, 0.f, dP, T);
      gemm(true, false, T, hs, T, 1.f, P, T, dO, C, 0.f, dv, C3);
      for (int t = 0; t < T; ++t) {
        const float* prow = P + static_cast<size_t>(t) * T;
        float* drow = dP + static_cast<size_t>(t) * T;
        float dot = 0.f;
        for (int s = 0; s <= t; ++s) dot += prow[s] * drow[s];
        for (int s = 0; s <= t; ++s) drow[s] = prow[s] * (drow[s] - dot);
        for (int s = t + 1; s < T; ++s) drow[s] = 0.f;
      }
      gemm(false, false, T, hs, T, scale, dP, T, k, C3, 0.f, dq, C3);
      gemm(true, false, T, hs, T, scale, dP, T, q, C3, 0.f, dk, C3);
    }
  });
}

}  // namespace qkv::kernels
