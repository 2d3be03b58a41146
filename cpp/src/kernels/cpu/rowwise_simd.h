#pragma once
// The SIMD bodies of the row-wise kernels, written once over xsimd::batch<float, Arch> and instantiated per
// instruction set in kernels/cpu/arch/<isa>.cpp (each compiled with that set's flags) through
// rowwise_kernels_for<Arch>(). Only those files include this header; the op files see rowwise.h. The math of
// each kernel is in kernels.h and beside its scalar reference (kernels/cpu/<op>.cpp).
//
// Row tails narrower than a vector go through a W-float stack buffer (load_tail / store_tail), so tails run
// the same vector math as the body. No std:: math here (builtins and xsimd only): this header is compiled
// with per-ISA flags, and an inline library function instantiated here could be the copy the linker keeps
// for the whole program.
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/rowwise.h"

namespace qkv::kernels {
namespace rowwise_simd {

// Lane indices 0, 1, 2, ...: a tail's lane mask is iota < n.
alignas(64) inline constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// The first n < W floats at p as one batch, the other lanes set to fill.
template <class V>
V load_tail(const float* p, int n, float fill) {
  alignas(64) float buf[V::size];
  for (int i = 0; i < static_cast<int>(V::size); ++i) buf[i] = i < n ? p[i] : fill;
  return V::load_aligned(buf);
}

template <class V>
void store_tail(float* p, const V& v, int n) {
  alignas(64) float buf[V::size];
  v.store_aligned(buf);
  for (int i = 0; i < n; ++i) p[i] = buf[i];
}

// One step of a loop over a row in vectors: W floats at column i, or the n < W of the tail.
template <class V>
struct Step {
  int i, n;
  bool full() const { return n == static_cast<int>(V::size); }
  V load(const float* row, float fill = 0.f) const {
    return full() ? V::load_unaligned(row + i) : load_tail<V>(row + i, n, fill);
  }
  void store(float* row, const V& v) const {
    if (full())
      v.store_unaligned(row + i);
    else
      store_tail(row + i, v, n);
  }
  // v with the lanes past the tail set to 0.
  V keep(const V& v) const {
    return full() ? v : xsimd::select(V::load_aligned(kIota) < V(static_cast<float>(n)), v, V(0.f));
  }
};

// body(step) for each vector of a row of `len` floats.
template <class V, class F>
void over_row(int len, F&& body) {
  constexpr int W = static_cast<int>(V::size);
  for (int i = 0; i < len; i += W) body(Step<V>{i, len - i < W ? len - i : W});
}

template <class V>
float hmax(const V& v) {
  alignas(64) float buf[V::size];
  v.store_aligned(buf);
  float m = buf[0];
  for (size_t i = 1; i < V::size; ++i) m = buf[i] > m ? buf[i] : m;
  return m;
}

// ---- LayerNorm, optionally with the residual add before it ----

template <class Arch>
void layernorm_rows(const LayerNormArgs& a, int r0, int r1) {
  using V = xsimd::batch<float, Arch>;
  const int C = a.C;
  const float Cf = static_cast<float>(C);
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * C;
    const float* src = a.x + o;
    V sum(0.f);
    if (a.f) {
      float* r = a.r + o;
      over_row<V>(C, [&](Step<V> s) {
        const V v = s.load(a.x + o) + s.load(a.f + o);
        s.store(r, v);
        sum += v;
      });
      src = r;
    } else {
      over_row<V>(C, [&](Step<V> s) { sum += s.load(src); });
    }
    const float m = xsimd::hadd(sum) / Cf;
    const V vm(m);
    V var(0.f);
    over_row<V>(C, [&](Step<V> s) {
      const V d = s.load(src, m) - vm;  // tail lanes hold m: d = 0
      var = xsimd::fma(d, d, var);
    });
    const float rs = 1.f / __builtin_sqrtf(xsimd::hadd(var) / Cf + kLayerNormEps);
    const V vs(rs);
    float* y = a.y + o;
    over_row<V>(C, [&](Step<V> s) { s.store(y, xsimd::fma((s.load(src) - vm) * vs, s.load(a.w), s.load(a.b))); });
    a.mean[row] = m;
    a.rstd[row] = rs;
  }
}

template <class Arch>
void layernorm_backward_rows(const LayerNormBackwardArgs& a, int r0, int r1, float* dw, float* db) {
  using V = xsimd::batch<float, Arch>;
  const int C = a.C;
  const float Cf = static_cast<float>(C);
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * C;
    const float *x = a.x + o, *dy = a.dy + o;
    const float m = a.mean[row];
    const V vm(m), vs(a.rstd[row]);
    V sum_g(0.f), sum_gx(0.f);
    over_row<V>(C, [&](Step<V> s) {
      const V g = s.load(dy) * s.load(a.w);  // tail lanes: dy = 0, so g = 0
      sum_g += g;
      sum_gx = xsimd::fma(g, (s.load(x, m) - vm) * vs, sum_gx);
    });
    const V mean_g(xsimd::hadd(sum_g) / Cf), mean_gx(xsimd::hadd(sum_gx) / Cf);
    float* dx = a.dx + o;
    const float* dr = a.dr ? a.dr + o : nullptr;
    over_row<V>(C, [&](Step<V> s) {
      const V dyv = s.load(dy), xhat = (s.load(x) - vm) * vs;
      V d = vs * (dyv * s.load(a.w) - mean_g - xhat * mean_gx);
      if (dr) d = s.load(dr) + d;
      s.store(dx, d);
      s.store(dw, xsimd::fma(dyv, xhat, s.load(dw)));
      s.store(db, s.load(db) + dyv);
    });
  }
}

// ---- bias + activation ----

constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// Phi(h), the standard normal CDF, and e = exp(-h^2/2), from one exp and no branch. With x = |h|/sqrt(2),
// 0.5 erfc(x) = 0.5 e R(t), where R = erfc(x) exp(x^2) is a polynomial in t = 1/(1 + x/2) (degree 9, fitted by
// scripts/fit-gelu.py: relative error 3.2e-8 over x in [0, 10]; past that e is 0 in float), and
// Phi(h) = 0.5 erfc(x) for h < 0, 1 - 0.5 erfc(x) otherwise: no two close numbers are subtracted, so it serves
// every h. Why not xsimd::erf: it evaluates two polynomials (|x| < 2/3 and above) and an exp, and the backward
// then needs a second exp for the density; this takes one of each, and e serves the density.
template <class V>
V normal_cdf(const V& h, V& e) {
  const V x = xsimd::abs(h) * V(kSqrt1_2);
  const V t = V(1.f) / xsimd::fma(V(0.5f), x, V(1.f));
  V r(-5.505166575e-02f);
  r = xsimd::fma(r, t, V(2.639049888e-01f));
  r = xsimd::fma(r, t, V(-4.414817989e-01f));
  r = xsimd::fma(r, t, V(2.211960852e-01f));
  r = xsimd::fma(r, t, V(1.707379706e-02f));
  r = xsimd::fma(r, t, V(1.812517494e-01f));
  r = xsimd::fma(r, t, V(2.497929335e-01f));
  r = xsimd::fma(r, t, V(2.810985446e-01f));
  r = xsimd::fma(r, t, V(2.822213769e-01f));
  r = xsimd::fma(r, t, V(-6.010835932e-06f));
  e = xsimd::exp(V(-0.5f) * h * h);
  const V q = V(0.5f) * e * r;  // 0.5 erfc(x) = Phi(-|h|)
  return xsimd::select(h < V(0.f), q, V(1.f) - q);
}

// Phi(h) for |h| <= kSmallH, without an exp: 0.5 + 0.5 erf(x), x = h/sqrt(2), erf(x) = x S(x^2) (degree 5,
// relative error 7e-10; scripts/fit-gelu.py). Early in training every pre-activation is this small (weights
// drawn with std 0.02), and a vector that is all small skips normal_cdf's division and longer polynomial.
constexpr float kSmallH = 1.f;
template <class V>
V normal_cdf_small(const V& h) {
  const V x = h * V(kSqrt1_2), s = x * x;
  V p(-6.927797804e-04f);
  p = xsimd::fma(p, s, V(5.135806743e-03f));
  p = xsimd::fma(p, s, V(-2.684358135e-02f));
  p = xsimd::fma(p, s, V(1.128352731e-01f));
  p = xsimd::fma(p, s, V(-3.761262894e-01f));
  p = xsimd::fma(p, s, V(1.128379226e+00f));
  return xsimd::fma(V(0.5f) * x, p, V(0.5f));
}

// In float32 (scripts/fit-gelu.py checks both branches): |GELU error| <= 1e-7 |h|, |GELU' error| <= 8e-8 (1 + |h|).
// GELU(h) = h Phi(h)
template <class V>
V gelu(const V& h) {
  if (xsimd::all(xsimd::abs(h) <= V(kSmallH))) return h * normal_cdf_small(h);
  V e;
  return h * normal_cdf(h, e);
}

// GELU'(h) for |h| <= kSmallH, without an exp: Phi(h) - 1/2 and h phi(h) are both odd, so
// GELU'(h) = 1/2 + h Q(h^2), Q(s) = (Phi(h) - 1/2 + h phi(h)) / h, one polynomial (degree 5, relative error 5e-9;
// scripts/fit-gelu.py). Taking Phi and the density apart here cost an exp, most of the backward's time.
template <class V>
V gelu_grad_small(const V& h) {
  const V s = h * h;
  V q(-8.853090549e-05f);
  q = xsimd::fma(q, s, V(1.127310097e-03f));
  q = xsimd::fma(q, s, V(-9.484680369e-03f));
  q = xsimd::fma(q, s, V(5.983804539e-02f));
  q = xsimd::fma(q, s, V(-2.659612298e-01f));
  q = xsimd::fma(q, s, V(7.978845835e-01f));
  return xsimd::fma(h, q, V(0.5f));
}

// GELU'(h) = Phi(h) + h phi(h), phi(h) = e / sqrt(2 pi)
template <class V>
V gelu_grad(const V& h) {
  if (xsimd::all(xsimd::abs(h) <= V(kSmallH))) return gelu_grad_small(h);
  V e;
  const V cdf = normal_cdf(h, e);
  return xsimd::fma(h, e * V(kInvSqrt2Pi), cdf);
}

// GELU's tanh approximation (GPT-2's gelu_new), with u = sqrt(2/pi) (h + k h^3), k = 0.044715:
//   0.5 h (1 + tanh(u)) = h sigma(z),  z = 2u,  sigma(z) = 1 / (1 + exp(-z)),
// since 1 + tanh(u) = 2 sigma(2u). Why not tanh: 1 + tanh(u) cancels for negative u (PyTorch loses all digits of
// it past h = -5 in float), and a tanh is an exp and a division anyway. sigma from e = exp(-|z|), which never
// overflows: r = 1 / (1 + e), sigma = r for z >= 0, e r for z < 0 (= exp(z) / (1 + exp(z))). Far out, e is 0
// exactly (xsimd's exp flushes to 0 below about -87.7, and selects 0 below its minlog, -88.4: past |h| = 10.1),
// so the value is exactly h or 0, as in PyTorch's float32; an h^3 that overflows makes z infinite, which only
// drives e to 0.
constexpr float kTanhGeluK = 0.044715f;
constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2/pi): z = h (2 sqrt(2/pi) + 2 sqrt(2/pi) k h^2)
template <class V>
V gelu_tanh_sigma(const V& h, V& e, V& r) {
  const V z = h * xsimd::fma(V(kTwoSqrt2OverPi * kTanhGeluK) * h, h, V(kTwoSqrt2OverPi));
  e = xsimd::exp(-xsimd::abs(z));
  r = V(1.f) / (V(1.f) + e);
  return xsimd::select(z < V(0.f), e * r, r);
}

template <class V>
V gelu_tanh(const V& h) {
  V e, r;
  return h * gelu_tanh_sigma(h, e, r);
}

// d/dh h sigma(z) = sigma + h z' sigma (1 - sigma), z' = 2 sqrt(2/pi) (1 + 3k h^2), and sigma (1 - sigma) = e r^2
// for either sign of z. h in the second term is clamped to [-10, 10]: beyond, e < 2e-38 makes the term vanish
// anyway, and the clamp keeps h z' (cubic in h) from overflowing into inf * 0 = NaN. A NaN h still gives NaN (e).
template <class V>
V gelu_tanh_grad(const V& h) {
  V e, r;
  const V sigma = gelu_tanh_sigma(h, e, r);
  const V hc = xsimd::min(xsimd::max(h, V(-10.f)), V(10.f));
  const V dz = xsimd::fma(V(3.f * kTwoSqrt2OverPi * kTanhGeluK) * hc, hc, V(kTwoSqrt2OverPi));
  return xsimd::fma(hc * dz, e * r * r, sigma);
}

template <class Arch, Act act>
void bias_act_rows_for(const BiasActArgs& a, int r0, int r1) {
  using V = xsimd::batch<float, Arch>;
  const int N = a.N;
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * N;
    float *h = a.h + o, *out = a.a + o;
    over_row<V>(N, [&](Step<V> s) {
      V v = s.load(h);
      if (a.b) {
        v += s.load(a.b);
        if (act != Act::Identity || out != h) s.store(h, v);
      }
      if constexpr (act == Act::ReLU) v = xsimd::max(v, V(0.f));
      if constexpr (act == Act::GELU) v = gelu(v);
      if constexpr (act == Act::GELUTanh) v = gelu_tanh(v);
      s.store(out, v);
    });
  }
}

template <class Arch>
void bias_act_rows(const BiasActArgs& a, int r0, int r1) {
  switch (a.act) {
    case Act::Identity: return bias_act_rows_for<Arch, Act::Identity>(a, r0, r1);
    case Act::ReLU: return bias_act_rows_for<Arch, Act::ReLU>(a, r0, r1);
    case Act::GELU: return bias_act_rows_for<Arch, Act::GELU>(a, r0, r1);
    case Act::GELUTanh: return bias_act_rows_for<Arch, Act::GELUTanh>(a, r0, r1);
  }
}

template <class Arch, Act act>
void bias_act_backward_rows_for(const BiasActBackwardArgs& a, int r0, int r1, float* db) {
  using V = xsimd::batch<float, Arch>;
  const int N = a.N;
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * N;
    over_row<V>(N, [&](Step<V> s) {
      V d = s.load(a.da + o);
      if constexpr (act == Act::ReLU) d = xsimd::select(s.load(a.h + o) > V(0.f), d, V(0.f));
      if constexpr (act == Act::GELU) d = d * gelu_grad(s.load(a.h + o));
      if constexpr (act == Act::GELUTanh) d = d * gelu_tanh_grad(s.load(a.h + o));
      if (a.dh) s.store(a.dh + o, d);
      if (db) s.store(db, s.load(db) + d);
    });
  }
}

template <class Arch>
void bias_act_backward_rows(const BiasActBackwardArgs& a, int r0, int r1, float* db) {
  switch (a.act) {
    case Act::Identity: return bias_act_backward_rows_for<Arch, Act::Identity>(a, r0, r1, db);
    case Act::ReLU: return bias_act_backward_rows_for<Arch, Act::ReLU>(a, r0, r1, db);
    case Act::GELU: return bias_act_backward_rows_for<Arch, Act::GELU>(a, r0, r1, db);
    case Act::GELUTanh: return bias_act_backward_rows_for<Arch, Act::GELUTanh>(a, r0, r1, db);
  }
}

// ---- softmax cross-entropy, with the gradient in the same sweep ----

template <class Arch>
void crossentropy_rows(const CrossEntropyArgs& a, int r0, int r1) {
  using V = xsimd::batch<float, Arch>;
  const int V_ = a.V;
  const float Vf = static_cast<float>(V_);
  const float minus_inf = -__builtin_inff();
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * V_;
    const float* z = a.logits + o;
    float* d = a.dlogits ? a.dlogits + o : nullptr;
    const int t = a.targets[row];
    if (t == a.ignore_index) {
      a.losses[row] = 0.f;
      if (d) over_row<V>(V_, [&](Step<V> s) { s.store(d, V(0.f)); });
      continue;
    }
    const float zt = z[t];  // read before d (which may alias z) is written
    V vmax(minus_inf);
    over_row<V>(V_, [&](Step<V> s) { vmax = xsimd::max(vmax, s.load(z, minus_inf)); });
    const float mx = hmax(vmax);
    const V vmx(mx);
    // e = exp(z - max) (into d when the gradient is wanted), their sum, and sum(max - z) for smoothing.
    V sum(0.f), below(0.f);
    over_row<V>(V_, [&](Step<V> s) {
      const V zv = s.load(z, mx);  // tail lanes hold max: below += 0
      const V e = s.keep(xsimd::exp(zv - vmx));
      sum += e;
      below += vmx - zv;
      if (d) s.store(d, e);
    });
    const float total = xsimd::hadd(sum), log_total = __builtin_logf(total);
    float loss = (1.f - a.smoothing) * (log_total + mx - zt);
    // sum_c (lse - z[c]) = V log(total) + sum_c (max - z[c]): two non-negative terms, no cancellation.
    if (a.smoothing > 0.f) loss += a.smoothing / Vf * (Vf * log_total + xsimd::hadd(below));
    a.losses[row] = loss;
    if (d) {
      const V inv(1.f / total), scale(a.scale), uniform(a.smoothing / Vf);
      over_row<V>(V_, [&](Step<V> s) { s.store(d, scale * (s.load(d) * inv - uniform)); });
      d[t] -= a.scale * (1.f - a.smoothing);
    }
  }
}

// ---- Adam(W) over one range with one weight decay, and the squared norm for clipping ----

template <class Arch>
void adam(float* p, float* m, float* v, const float* g, size_t n, const AdamArgs& a) {
  using V = xsimd::batch<float, Arch>;
  constexpr size_t W = V::size;
  const V grad_scale(a.grad_scale), l2(a.l2), shrink(a.shrink), beta1(a.beta1), beta2(a.beta2),
      one_minus_beta1(1.f - a.beta1), one_minus_beta2(1.f - a.beta2), step(a.step), sqrt_bc2(a.sqrt_bc2), eps(a.eps);
  for (size_t i = 0; i < n; i += W) {
    const Step<V> s{0, n - i < W ? static_cast<int>(n - i) : static_cast<int>(W)};
    V pv = s.load(p + i);
    const V gi = s.load(g + i) * grad_scale + l2 * pv;
    pv = pv * shrink;
    const V mv = beta1 * s.load(m + i) + one_minus_beta1 * gi;
    const V vv = beta2 * s.load(v + i) + one_minus_beta2 * gi * gi;
    pv = pv - step * (mv / (xsimd::sqrt(vv) / sqrt_bc2 + eps));
    s.store(p + i, pv);
    s.store(m + i, mv);
    s.store(v + i, vv);
  }
}

template <class Arch>
double sum_squares(const float* x, size_t n) {
  using V = xsimd::batch<float, Arch>;
  constexpr size_t W = V::size, kBlock = 64 * W;  // float lanes within a block, double across blocks
  double total = 0.0;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t end = n - b < kBlock ? n : b + kBlock;
    V acc(0.f);
    for (size_t i = b; i < end; i += W) {
      const V xv = Step<V>{0, end - i < W ? static_cast<int>(end - i) : static_cast<int>(W)}.load(x + i);
      acc = xsimd::fma(xv, xv, acc);
    }
    total += static_cast<double>(xsimd::hadd(acc));
  }
  return total;
}

}  // namespace rowwise_simd

template <class Arch>
const RowwiseKernels& rowwise_kernels_for() {
  static const RowwiseKernels k{&rowwise_simd::layernorm_rows<Arch>,    &rowwise_simd::layernorm_backward_rows<Arch>,
                                &rowwise_simd::bias_act_rows<Arch>,     &rowwise_simd::bias_act_backward_rows<Arch>,
                                &rowwise_simd::crossentropy_rows<Arch>, &rowwise_simd::adam<Arch>,
                                &rowwise_simd::sum_squares<Arch>};
  return k;
}

}  // namespace qkv::kernels
