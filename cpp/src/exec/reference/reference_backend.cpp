// The reference executor: every op of the contract as plain loops on one thread — no SIMD, no thread pool, no
// tiling — written from the formulas (kernels/kernels.h), so that each faster executor is judged against an
// oracle that shares none of its code. tests/cpp/ops/backend_ops_test.cpp compares every backend with it, and
// ops::set_cpu_reference routes whole models through it (tests/cpp/models/reference_test.cpp).
// Memory is host memory. Parameter gradients accumulate (+=), as the contract says.
// Legend: B batch, T / Tq / Tk sequence lengths, C channels, H heads, hs = C/H, V vocabulary, N a row's width.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"
#include "ops/backends.h"
#include "ops/dropout_hash.h"
#include "ops/weight_quantize.h"
#include "qkv/error.h"

namespace qkv::ops {
namespace {

constexpr float kLayerNormEps = 1e-5f;
// GELU's tanh approximation: u = sqrt(2/pi) (h + k h^3) (kernels.h: GELUTanh).
constexpr float kSqrt2OverPi = 0.7978845608028654f, kTanhGeluK = 0.044715f;

float act_of(Act act, float h) {
  switch (act) {
    case Act::Identity: return h;
    case Act::ReLU: return h > 0.f ? h : 0.f;
    case Act::GELU: return 0.5f * h * (1.f + std::erf(h * 0.70710678118654752f));
    case Act::GELUTanh: return 0.5f * h * (1.f + std::tanh(kSqrt2OverPi * (h + kTanhGeluK * h * h * h)));
  }
  return h;
}

// d act(h) / dh
float act_grad(Act act, float h) {
  switch (act) {
    case Act::Identity: return 1.f;
    case Act::ReLU: return h > 0.f ? 1.f : 0.f;
    case Act::GELU:
      return 0.5f * (1.f + std::erf(h * 0.70710678118654752f)) + h * 0.3989422804014327f * std::exp(-0.5f * h * h);
    case Act::GELUTanh: {
      // 0.5 (1 + t) + 0.5 h (1 - t^2) u', t = tanh(u), u' = sqrt(2/pi) (1 + 3k h^2). Past |h| = 10, t is +-1
      // exactly and the value 1 or 0: clamping h there keeps h^3 from overflowing into inf * 0.
      const float x = std::clamp(h, -10.f, 10.f);
      const float t = std::tanh(kSqrt2OverPi * (x + kTanhGeluK * x * x * x));
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kTanhGeluK * x * x);
    }
  }
  return 1.f;
}

// Inverted dropout of one element: kept when hash(seed, i) >= p * 2^32, then multiplied by 1/(1-p) (the
// factor rounded once, as every executor does, so that masks and values agree bit for bit).
float dropped(float x, float p, uint64_t seed, uint64_t i) {
  if (p <= 0.f) return x;
  return dropout_hash(seed, i) >= dropout_threshold(p) ? x * (1.f / (1.f - p)) : 0.f;
}

bool visible(const AttentionShape& s, int b, int t, int key) {
  if (s.causal && key > t + s.q_pos) return false;
  return !(s.key_pad && s.key_pad[static_cast<size_t>(b) * s.key_rows() + key]);
}

class ReferenceBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "reference"; }

  void* allocate(size_t bytes) override { return host_allocate(bytes); }
  void free(void* p) noexcept override { host_free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) override {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        dst[static_cast<size_t>(r) * ld_dst + c] = src[static_cast<size_t>(r) * ld_src + c];
  }
  void fill(Span x, float value) override {
    for (float& v : x) v = value;
  }
  void synchronize(const char*) override {}

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    kernels::gemm_reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void add(Span out, CSpan a, CSpan b) override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = a[i] + b[i];
  }

  // C (M,N) = A (M,K) deq(W)^T: gemm_reference's loops (float accumulation over k in order) on the dequantized W.
  // int8_act is a permission this executor does not take: the reference stays the fp32 product.
  void gemm_quant(int M, int N, int K, const float* A, int lda, int format, const uint8_t* W, const float* scales,
                  float* C, int ldc, bool) override {
    check_gemm_quant("gemm_quant (reference)", M, N, K, A, lda, format, W, scales, C, ldc);
    const WeightFormat f = static_cast<WeightFormat>(format);
    const int spr = scales_per_row(f, K);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        const uint8_t* row = W + static_cast<size_t>(j) * row_stride(f, K);
        const float* s = spr ? scales + static_cast<size_t>(j) * spr : nullptr;
        float acc = 0.f;
        for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(i) * lda + k] * dequantize_element(f, row, s, k);
        C[static_cast<size_t>(i) * ldc + j] = acc;
      }
  }
  void dequantize_rows(float* out, int ld_out, int format, const uint8_t* W, const float* scales, int rows,
                       int K) override {
    check_dequantize_rows("dequantize_rows (reference)", out, ld_out, format, W, scales, rows, K);
    const WeightFormat f = static_cast<WeightFormat>(format);
    const int spr = scales_per_row(f, K);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < K; ++k)
        out[static_cast<size_t>(r) * ld_out + k] = dequantize_element(
            f, W + static_cast<size_t>(r) * row_stride(f, K), spr ? scales + static_cast<size_t>(r) * spr : nullptr, k);
  }

  // y = (x - mean) * rstd * w + b per row, mean and biased variance in double.
  void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) override {
    for (int r = 0; r < rows; ++r) normalize_row(y.data(), mean, rstd, x.data(), w, b, r, C);
  }
  // r = x + f, then y = LN(r); r may alias x or f (each element is read before it is written).
  void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b, int rows,
                                  int C) override {
    for (size_t i = 0; i < static_cast<size_t>(rows) * C; ++i) r[i] = x[i] + f[i];
    for (int row = 0; row < rows; ++row) normalize_row(y.data(), mean, rstd, r.data(), w, b, row, C);
  }
  size_t layernorm_backward_scratch_size(int, int) const override { return 0; }
  // xhat = (x - mean) * rstd, g = dy * w: dx = dr + rstd * (g - mean(g) - xhat * mean(g * xhat)),
  // dw += sum_rows dy * xhat, db += sum_rows dy. dr may alias dx or be empty.
  void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                          int rows, int C, Span) override {
    for (int r = 0; r < rows; ++r) {
      const size_t o = static_cast<size_t>(r) * C;
      double mg = 0, mgx = 0;
      for (int i = 0; i < C; ++i) {
        const double xhat = (static_cast<double>(x[o + i]) - mean[r]) * rstd[r],
                     g = static_cast<double>(dy[o + i]) * w[i];
        mg += g;
        mgx += g * xhat;
      }
      mg /= C;
      mgx /= C;
      for (int i = 0; i < C; ++i) {
        const double xhat = (static_cast<double>(x[o + i]) - mean[r]) * rstd[r],
                     g = static_cast<double>(dy[o + i]) * w[i];
        const double d = rstd[r] * (g - mg - xhat * mgx);
        dx[o + i] = static_cast<float>((dr.empty() ? 0.0 : static_cast<double>(dr[o + i])) + d);
        dw[i] += static_cast<float>(dy[o + i] * xhat);
        db[i] += dy[o + i];
      }
    }
  }

  // h += b (b may be empty), a = act(h); a may alias h.
  void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N) override {
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < N; ++i) {
        const size_t k = static_cast<size_t>(r) * N + i;
        if (!b.empty()) h[k] += b[i];
        a[k] = act_of(act, h[k]);
      }
  }
  size_t bias_act_backward_scratch_size(int, int) const override { return 0; }
  // dh = da * act'(h) (dh may alias da, or be empty: then only db, of da itself: the Identity case);
  // db += column sums of dh (db may be empty).
  void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N, Span) override {
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < N; ++i) {
        const size_t k = static_cast<size_t>(r) * N + i;
        const float g = h.empty() ? da[k] : da[k] * act_grad(act, h[k]);
        if (!dh.empty()) dh[k] = g;
        if (!db.empty()) db[i] += g;
      }
  }

  void dropout_forward(Span y, CSpan x, float p, uint64_t seed) override {
    for (size_t i = 0; i < y.size(); ++i) y[i] = dropped(x[i], p, seed, i);
  }
  void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed) override {
    for (size_t i = 0; i < dx.size(); ++i) dx[i] = dropped(dy[i], p, seed, i);
  }

  // Scratch: one query row's weights P and their gradient, (2, key_rows).
  size_t attention_scratch_size(const AttentionShape& s, int) const override {
    return 2 * static_cast<size_t>(std::max(s.key_rows(), s.Tk));
  }
  void check_attention_scratch(const char* op, Span scratch, const AttentionShape& s) const {
    check(scratch.size() >= attention_scratch_size(s, 1), op, " (reference): scratch holds ", scratch.size(),
          " floats: expected at least ", attention_scratch_size(s, 1), " (attention_scratch_size)");
  }
  // Per (b, h, t): S = q k^T / sqrt(hs) over the visible keys, P = softmax(S), lse = log of its normaliser
  // (+inf when every key is masked, and then out = 0), out = dropout(P) v.
  void attention_forward(Span out, Span lse, const float* q, const float* k, const float* v, const AttentionShape& s,
                         Span scratch) override {
    check_attention_scratch("attention_forward", scratch, s);
    const int hs = s.C / s.H;
    float* P = scratch.data();
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.H; ++h)
        for (int t = 0; t < s.Tq; ++t) {
          const float l = softmax_row(P, q, k, s, b, h, t);
          lse[(static_cast<size_t>(b) * s.H + h) * s.Tq + t] = l;
          float* o = out.data() + (static_cast<size_t>(b) * s.Tq + t) * s.C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] = 0.f;
          for (int j = 0; j < s.Tk; ++j) {
            const float pd = dropped(P[j], s.dropout, s.seed, drop_index(s, b, h, t, j));
            const float* vj = v + (static_cast<size_t>(b) * s.key_rows() + j) * s.ldkv + h * hs;
            for (int i = 0; i < hs; ++i) o[i] += pd * vj[i];
          }
        }
  }
  // With P recomputed and Pd = dropout(P): dPd = dout v^T, dv = Pd^T dout, dP = dropout'(dPd),
  // dS = P * (dP - sum(P * dP)), dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs). dq, dk, dv are overwritten in the
  // heads' columns (dk and dv over the Tk key rows).
  void attention_backward(float* dq, float* dk, float* dv, CSpan dout, const float* q, const float* k, const float* v,
                          CSpan, CSpan, const AttentionShape& s, Span scratch) override {
    check_attention_scratch("attention_backward", scratch, s);
    const int hs = s.C / s.H;
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    float* P = scratch.data();
    float* dP = P + std::max(s.key_rows(), s.Tk);
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.H; ++h) {
        for (int t = 0; t < s.Tq; ++t)
          for (int i = 0; i < hs; ++i) dq[(static_cast<size_t>(b) * s.Tq + t) * s.ldq + h * hs + i] = 0.f;
        for (int j = 0; j < s.Tk; ++j)
          for (int i = 0; i < hs; ++i) {
            const size_t kj = (static_cast<size_t>(b) * s.key_rows() + j) * s.ldkv + h * hs + i;
            dk[kj] = 0.f;
            dv[kj] = 0.f;
          }
        for (int t = 0; t < s.Tq; ++t) {
          softmax_row(P, q, k, s, b, h, t);
          const float* go = dout.data() + (static_cast<size_t>(b) * s.Tq + t) * s.C + h * hs;
          const float* qt = q + (static_cast<size_t>(b) * s.Tq + t) * s.ldq + h * hs;
          float* dqt = dq + (static_cast<size_t>(b) * s.Tq + t) * s.ldq + h * hs;
          double D = 0;
          for (int j = 0; j < s.Tk; ++j) {
            const uint64_t at = drop_index(s, b, h, t, j);
            const size_t kj = (static_cast<size_t>(b) * s.key_rows() + j) * s.ldkv + h * hs;
            float dpd = 0.f;
            for (int i = 0; i < hs; ++i) dpd += go[i] * v[kj + i];
            const float pd = dropped(P[j], s.dropout, s.seed, at);
            for (int i = 0; i < hs; ++i) dv[kj + i] += pd * go[i];
            dP[j] = dropped(dpd, s.dropout, s.seed, at);
            D += static_cast<double>(P[j]) * dP[j];
          }
          for (int j = 0; j < s.Tk; ++j) {
            const float dS = P[j] * (dP[j] - static_cast<float>(D));
            const size_t kj = (static_cast<size_t>(b) * s.key_rows() + j) * s.ldkv + h * hs;
            for (int i = 0; i < hs; ++i) {
              dqt[i] += dS * k[kj + i] * scale;
              dk[kj + i] += dS * qt[i] * scale;
            }
          }
        }
      }
  }
  void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s) override {
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.H; ++h)
        for (int t = 0; t < s.Tq; ++t)
          softmax_row(att.data() + ((static_cast<size_t>(b) * s.H + h) * s.Tq + t) * s.Tk, q, k, s, b, h, t);
  }

  // x[b,t] = scale * wte[token] + pos[t]
  void embedding_forward(Span x, const Ids& tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C) override {
    for (int r = 0; r < B * T; ++r) {
      const size_t e = static_cast<size_t>(tokens.host[static_cast<size_t>(r)]) * C, p = static_cast<size_t>(r % T) * C;
      for (int i = 0; i < C; ++i)
        x[static_cast<size_t>(r) * C + i] = scale * wte[e + i] + (pos.empty() ? 0.f : pos[p + i]);
    }
  }
  // x[b,t] = scale * deq(wte[token]) + pos[t] (pos empty: 0), each element dequantize_element's float.
  void embedding_forward_quant(Span x, const Ids& tokens, int format, const uint8_t* wte, const float* wte_scales,
                               CSpan pos, float scale, int B, int T, int C) override {
    check_embedding_forward_quant("embedding_forward_quant (reference)", x.size(), tokens.host.data(), format, wte,
                                  wte_scales, pos.size(), B, T, C);
    const WeightFormat f = static_cast<WeightFormat>(format);
    const int spr = scales_per_row(f, C);
    for (int r = 0; r < B * T; ++r) {
      const size_t e = static_cast<size_t>(tokens.host[static_cast<size_t>(r)]), p = static_cast<size_t>(r % T) * C;
      const uint8_t* row = wte + e * row_stride(f, C);
      const float* s = spr ? wte_scales + e * spr : nullptr;
      for (int i = 0; i < C; ++i)
        x[static_cast<size_t>(r) * C + i] = scale * dequantize_element(f, row, s, i) + (pos.empty() ? 0.f : pos[p + i]);
    }
  }
  size_t embedding_backward_scratch_size(int, int) const override { return 0; }
  // dwte[token] += scale * dx[b,t], dpos[t] += dx[b,t], rows in (b, t) order.
  void embedding_backward(Span dwte, Span dpos, CSpan dx, const Ids& tokens, float scale, int B, int T, int C,
                          Span) override {
    for (int r = 0; r < B * T; ++r) {
      const size_t e = static_cast<size_t>(tokens.host[static_cast<size_t>(r)]) * C, p = static_cast<size_t>(r % T) * C;
      for (int i = 0; i < C; ++i) {
        dwte[e + i] += scale * dx[static_cast<size_t>(r) * C + i];
        if (!dpos.empty()) dpos[p + i] += dx[static_cast<size_t>(r) * C + i];
      }
    }
  }

  void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C) override {
    for (int b = 0; b < B; ++b) {
      const int n = count(key_pad, b, T);
      for (int i = 0; i < C; ++i) {
        float sum = 0.f;
        for (int t = 0; t < T; ++t)
          if (!key_pad[static_cast<size_t>(b) * T + t]) sum += x[(static_cast<size_t>(b) * T + t) * C + i];
        out[static_cast<size_t>(b) * C + i] = n ? sum * (1.f / static_cast<float>(n)) : 0.f;
      }
    }
  }
  void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C) override {
    for (int b = 0; b < B; ++b) {
      const int n = count(key_pad, b, T);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < C; ++i)
          dx[(static_cast<size_t>(b) * T + t) * C + i] =
              key_pad[static_cast<size_t>(b) * T + t] || n == 0
                  ? 0.f
                  : dout[static_cast<size_t>(b) * C + i] * (1.f / static_cast<float>(n));
    }
  }

  void crossentropy_forward(Span losses, CSpan logits, const Ids& targets, int rows, int V, int ignore_index,
                            float smoothing) override {
    for (int r = 0; r < rows; ++r)
      losses[static_cast<size_t>(r)] =
          crossentropy_row(nullptr, logits.data() + static_cast<size_t>(r) * V, targets.host[static_cast<size_t>(r)],
                           0.f, V, ignore_index, smoothing);
  }
  void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const Ids& targets, float scale, int rows,
                                     int V, int ignore_index, float smoothing) override {
    for (int r = 0; r < rows; ++r)
      losses[static_cast<size_t>(r)] =
          crossentropy_row(dlogits.data() + static_cast<size_t>(r) * V, logits.data() + static_cast<size_t>(r) * V,
                           targets.host[static_cast<size_t>(r)], scale, V, ignore_index, smoothing);
  }
  void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) override {
    for (int r = 0; r < rows; ++r) {
      const float* z = logits.data() + static_cast<size_t>(r) * V;
      int m = 0;
      for (int v = 1; v < V; ++v)
        if (z[v] > z[m]) m = v;
      best[static_cast<size_t>(r)] = m;
    }
  }

  size_t adam_scratch_size(size_t) const override { return 0; }
  // torch's single-tensor Adam, element by element: g' = grad_scale * g (+ wd * p for Adam's L2); AdamW shrinks p by
  // 1 - lr * wd first; m = b1 m + (1-b1) g', v = b2 v + (1-b2) g'^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) +
  // eps).
  void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h,
                 Span) override {
    const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), h.t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), h.t);
    const float step = static_cast<float>(h.lr / bc1), sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
    for (const AdamRange& range : ranges) {
      const float l2 = h.decoupled ? 0.f : range.weight_decay;
      const float shrink =
          static_cast<float>(1.0 - (h.decoupled ? static_cast<double>(h.lr) * range.weight_decay : 0.0));
      for (size_t i = range.begin; i < range.end; ++i) {
        const float gi = g[i] * h.grad_scale + l2 * p[i];
        p[i] *= shrink;
        m[i] = h.beta1 * m[i] + (1.f - h.beta1) * gi;
        v[i] = h.beta2 * v[i] + (1.f - h.beta2) * gi * gi;
        p[i] -= step * (m[i] / (std::sqrt(v[i]) / sqrt_bc2 + h.eps));
      }
    }
  }
  size_t sum_squares_scratch_size() const override { return 0; }
  double sum_squares(CSpan x, Span) override {
    double sum = 0.0;
    for (float xi : x) sum += static_cast<double>(xi) * xi;
    return sum;
  }

 private:
  static void normalize_row(float* y, Span mean, Span rstd, const float* x, CSpan w, CSpan b, int r, int C) {
    const float* xr = x + static_cast<size_t>(r) * C;
    double mu = 0, var = 0;
    for (int i = 0; i < C; ++i) mu += xr[i];
    mu /= C;
    for (int i = 0; i < C; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= C;
    const double rs = 1.0 / std::sqrt(var + kLayerNormEps);
    mean[static_cast<size_t>(r)] = static_cast<float>(mu);
    rstd[static_cast<size_t>(r)] = static_cast<float>(rs);
    for (int i = 0; i < C; ++i) y[static_cast<size_t>(r) * C + i] = static_cast<float>((xr[i] - mu) * rs * w[i] + b[i]);
  }

  // The attention dropout's element index of (b, h, t, key).
  static uint64_t drop_index(const AttentionShape& s, int b, int h, int t, int j) {
    return ((static_cast<uint64_t>(b) * s.H + h) * s.Tq + t) * s.Tk + j;
  }

  // P (Tk) = the masked softmax of query row (b, h, t); returns the log of its normaliser (+inf, P = 0, when every
  // key is masked).
  static float softmax_row(float* P, const float* q, const float* k, const AttentionShape& s, int b, int h, int t) {
    const int hs = s.C / s.H;
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    const float* qt = q + (static_cast<size_t>(b) * s.Tq + t) * s.ldq + h * hs;
    double mx = -INFINITY;
    for (int j = 0; j < s.Tk; ++j) {
      if (!visible(s, b, t, j)) continue;
      const float* kj = k + (static_cast<size_t>(b) * s.key_rows() + j) * s.ldkv + h * hs;
      double dot = 0;
      for (int i = 0; i < hs; ++i) dot += static_cast<double>(qt[i]) * kj[i];
      P[j] = static_cast<float>(dot * scale);
      mx = std::max(mx, static_cast<double>(P[j]));
    }
    if (mx == -INFINITY) {
      for (int j = 0; j < s.Tk; ++j) P[j] = 0.f;
      return INFINITY;
    }
    double sum = 0;
    for (int j = 0; j < s.Tk; ++j) sum += visible(s, b, t, j) ? std::exp(P[j] - mx) : 0.0;
    for (int j = 0; j < s.Tk; ++j) P[j] = visible(s, b, t, j) ? static_cast<float>(std::exp(P[j] - mx) / sum) : 0.f;
    return static_cast<float>(mx + std::log(sum));
  }

  static int count(const uint8_t* key_pad, int b, int T) {
    int n = 0;
    for (int t = 0; t < T; ++t) n += key_pad[static_cast<size_t>(b) * T + t] == 0;
    return n;
  }

  // One row's loss, lse - z[target] smoothed with e/V of every class's, in double; and, when d is given,
  // d = scale * (softmax(z) - (1-e) onehot - e/V). An ignored row gives 0 and d = 0. d may alias z.
  static float crossentropy_row(float* d, const float* z, int target, float scale, int V, int ignore_index,
                                float smoothing) {
    if (target == ignore_index) {
      if (d)
        for (int i = 0; i < V; ++i) d[i] = 0.f;
      return 0.f;
    }
    double mx = z[0];
    for (int i = 1; i < V; ++i) mx = std::max(mx, static_cast<double>(z[i]));
    double sum = 0, all = 0;
    for (int i = 0; i < V; ++i) sum += std::exp(z[i] - mx);
    const double lse = mx + std::log(sum);
    for (int i = 0; i < V; ++i) all += lse - z[i];
    const double loss = (1.0 - smoothing) * (lse - z[target]) + smoothing / V * all;
    if (d)
      for (int i = 0; i < V; ++i) {
        const double p = std::exp(z[i] - lse);
        d[i] = static_cast<float>(scale * (p - (i == target ? 1.0 - smoothing : 0.0) - smoothing / V));
      }
    return static_cast<float>(loss);
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace qkv::ops
