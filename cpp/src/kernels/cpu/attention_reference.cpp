// The attention oracle: the whole (Tq,Tk) score matrix of each (batch, head) pair, materialised.
//   S = q k^T / sqrt(hs)            (Tq,Tk), masked entries excluded
//   P = softmax(S) row-wise          att
//   Pd = dropout(P)                  att_drop when p > 0
//   out = Pd v                       (Tq,hs) into the head's columns of (B,Tq,C)
// Backward (the products of the forward, transposed, and the softmax Jacobian):
//   dPd = dout v^T,  dv = Pd^T dout,  dP = dropout_backward(dPd)
//   dS = P * (dP - rowsum(dP * P))   masked entries have P = 0, so dS = 0 there
//   dq = dS k / sqrt(hs),  dk = dS^T q / sqrt(hs)
// attention.cpp holds the fused kernel the layers run; this file is what it is tested against, and
// attention_weights (the P above) is also how a layer shows its weights without the forward storing them.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/dropout.h"
#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {
namespace {

// Whether key s is visible to query t in batch b.
bool visible(const AttentionShape& s, int b, int t, int key) {
  if (s.causal && key > t + s.q_pos) return false;
  return !(s.key_pad && s.key_pad[static_cast<size_t>(b) * s.key_rows() + key]);
}

}  // namespace

void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s) {
  const int hs = s.C / s.H, Tq = s.Tq, Tk = s.Tk;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  parallel_for(static_cast<int64_t>(s.B) * s.H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / s.H), h = static_cast<int>(p % s.H);
      const float* qh = q + static_cast<size_t>(b) * Tq * s.ldq + h * hs;
      const float* kh = k + static_cast<size_t>(b) * s.key_rows() * s.ldkv + h * hs;
      float* P = att.data() + static_cast<size_t>(p) * Tq * Tk;
      gemm(false, true, Tq, Tk, hs, scale, qh, s.ldq, kh, s.ldkv, 0.f, P, Tk);
      for (int t = 0; t < Tq; ++t) {
        float* row = P + static_cast<size_t>(t) * Tk;
        float mx = -INFINITY;
        for (int j = 0; j < Tk; ++j)
          if (visible(s, b, t, j)) mx = std::max(mx, row[j]);
        float sum = 0.f;
        for (int j = 0; j < Tk; ++j) {
          row[j] = visible(s, b, t, j) ? std::exp(row[j] - mx) : 0.f;
          sum += row[j];
        }
        const float inv = sum > 0.f ? 1.f / sum : 0.f;  // all keys masked: zero weights
        for (int j = 0; j < Tk; ++j) row[j] *= inv;
      }
    }
  });
}

void attention_forward_reference(Span out, Span att, Span att_drop, const float* q, const float* k, const float* v,
                                 const AttentionShape& s) {
  const int hs = s.C / s.H, Tq = s.Tq, Tk = s.Tk;
  const bool drop = s.dropout > 0.f;
  const uint32_t threshold = dropout_threshold(s.dropout);
  const float keep_scale = drop ? 1.f / (1.f - s.dropout) : 1.f;
  attention_weights(att, q, k, s);
  parallel_for(static_cast<int64_t>(s.B) * s.H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / s.H), h = static_cast<int>(p % s.H);
      const float* vh = v + static_cast<size_t>(b) * s.key_rows() * s.ldkv + h * hs;
      const size_t off = static_cast<size_t>(p) * Tq * Tk;
      const float* P = att.data() + off;
      const float* Pv = P;
      if (drop) {
        float* D = att_drop.data() + off;
        for (size_t i = 0; i < static_cast<size_t>(Tq) * Tk; ++i)
          D[i] = dropout_hash(s.seed, off + i) >= threshold ? P[i] * keep_scale : 0.f;
        Pv = D;
      }
      gemm(false, false, Tq, hs, Tk, 1.f, Pv, Tk, vh, s.ldkv, 0.f,
           out.data() + static_cast<size_t>(b) * Tq * s.C + h * hs, s.C);
    }
  });
}

void attention_backward_reference(float* dq, float* dk, float* dv, Span datt, CSpan dout, const float* q,
                                  const float* k, const float* v, CSpan att, CSpan att_drop, const AttentionShape& s) {
  const int hs = s.C / s.H, Tq = s.Tq, Tk = s.Tk;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const bool drop = s.dropout > 0.f;
  const uint32_t threshold = dropout_threshold(s.dropout);
  const float keep_scale = drop ? 1.f / (1.f - s.dropout) : 1.f;
  parallel_for(static_cast<int64_t>(s.B) * s.H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / s.H), h = static_cast<int>(p % s.H);
      const size_t qo = static_cast<size_t>(b) * Tq * s.ldq + h * hs;
      const size_t ko = static_cast<size_t>(b) * s.key_rows() * s.ldkv + h * hs;
      const size_t off = static_cast<size_t>(p) * Tq * Tk;
      const float* P = att.data() + off;
      const float* Pv = drop ? att_drop.data() + off : P;
      float* dP = datt.data() + off;
      const float* dO = dout.data() + static_cast<size_t>(b) * Tq * s.C + h * hs;
      gemm(false, true, Tq, Tk, hs, 1.f, dO, s.C, v + ko, s.ldkv, 0.f, dP, Tk);
      gemm(true, false, Tk, hs, Tq, 1.f, Pv, Tk, dO, s.C, 0.f, dv + ko, s.ldkv);
      if (drop) {
        for (size_t i = 0; i < static_cast<size_t>(Tq) * Tk; ++i)
          dP[i] = dropout_hash(s.seed, off + i) >= threshold ? dP[i] * keep_scale : 0.f;
      }
      for (int t = 0; t < Tq; ++t) {
        const float* prow = P + static_cast<size_t>(t) * Tk;
        float* drow = dP + static_cast<size_t>(t) * Tk;
        float dot = 0.f;
        for (int j = 0; j < Tk; ++j) dot += prow[j] * drow[j];
        for (int j = 0; j < Tk; ++j) drow[j] = prow[j] * (drow[j] - dot);
      }
      gemm(false, false, Tq, hs, Tk, scale, dP, Tk, k + ko, s.ldkv, 0.f, dq + qo, s.ldq);
      gemm(true, false, Tk, hs, Tq, scale, dP, Tk, q + qo, s.ldq, 0.f, dk + ko, s.ldkv);
    }
  });
}

}  // namespace qkv::kernels
