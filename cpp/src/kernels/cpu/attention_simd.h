#pragma once
// The SIMD bodies of the fused attention kernel's row passes (attention_rows.h says what each computes),
// written once over xsimd::batch<float, Arch> and instantiated per instruction set in
// kernels/cpu/arch/<isa>.cpp. Each row runs whole vectors, then a scalar tail.
//
// Only xsimd, templates on Arch, lambdas and C functions are called here: a plain inline C++ function
// used here would be emitted by every <isa>.cpp with that set's flags, and the linker may keep any copy.
#include <math.h>

#include <xsimd/xsimd.hpp>

#include "kernels/cpu/attention_rows.h"

namespace qkv::kernels {

// The columns row r sees (AttentionTile's comment).
template <class Arch>
int attention_visible(const AttentionTile& t, int r) {
  const int n = r + t.diag + 1;
  return n < 0 ? 0 : n > t.cols ? t.cols : n;
}

template <class Arch>
float attention_hmax(const xsimd::batch<float, Arch>& v) {
  using V = xsimd::batch<float, Arch>;
  alignas(64) float lanes[V::size];
  v.store_aligned(lanes);
  float mx = lanes[0];
  for (size_t i = 1; i < V::size; ++i) mx = lanes[i] > mx ? lanes[i] : mx;
  return mx;
}

// 0, 1, 2, ... as floats: lane j of a vector at column j0 is column j0 + j.
alignas(64) constexpr float kAttentionLanes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// x where its column is below n, -inf elsewhere (x holds columns j0 .. j0 + W - 1).
template <class Arch>
xsimd::batch<float, Arch> attention_below(const xsimd::batch<float, Arch>& x, int j0, int n) {
  using V = xsimd::batch<float, Arch>;
  return xsimd::select(V::load_aligned(kAttentionLanes) < V(static_cast<float>(n - j0)), x, V(-INFINITY));
}

template <class Arch>
void attention_softmax_rows(const AttentionTile& t, float* m, float* l, float* alpha) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.S + static_cast<size_t>(r) * t.ld;
    const int n = attention_visible<Arch>(t, r);
    // Padding (score + -inf) and the columns past n (-inf) first, then the row's max.
    V vmax(-INFINITY);
    for (int j = 0; j < n; j += W) {
      V x = V::load_unaligned(s + j);
      if (t.bias) x += V::load_unaligned(t.bias + j);
      if (j + W > n) x = attention_below<Arch>(x, j, n);
      x.store_unaligned(s + j);
      vmax = xsimd::max(vmax, x);
    }
    const float mx = attention_hmax(vmax);
    const float m_new = mx > m[r] ? mx : m[r];
    if (m_new == -INFINITY) {  // nothing seen yet: m and l stay, the output rows stay 0
      for (int j = 0; j < t.cols; ++j) s[j] = 0.f;
      alpha[r] = 1.f;
      continue;
    }
    const V vm(m_new);
    V vsum(0.f);
    int j = 0;
    for (; j < n; j += W) {  // exp(-inf) = 0 for what the row does not see
      const V p = xsimd::exp(V::load_unaligned(s + j) - vm);
      p.store_unaligned(s + j);
      vsum += p;
    }
    for (; j < t.cols; ++j) s[j] = 0.f;
    alpha[r] = expf(m[r] - m_new);  // m = -inf: 0
    l[r] = l[r] * alpha[r] + xsimd::hadd(vsum);
    m[r] = m_new;
  }
}

template <class Arch>
void attention_probs_rows(const AttentionTile& t, const float* lse) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.S + static_cast<size_t>(r) * t.ld;
    const int n = attention_visible<Arch>(t, r);
    const V vl(lse[r]);
    int j = 0;
    for (; j < n; j += W) {
      V x = V::load_unaligned(s + j);
      if (t.bias) x += V::load_unaligned(t.bias + j);
      x -= vl;
      if (j + W > n) x = attention_below<Arch>(x, j, n);
      xsimd::exp(x).store_unaligned(s + j);
    }
    for (; j < t.cols; ++j) s[j] = 0.f;
  }
}

template <class Arch>
void attention_dscores_rows(const AttentionTile& t, float* dP, const float* D) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  for (int r = 0; r < t.rows; ++r) {
    const float* p = t.S + static_cast<size_t>(r) * t.ld;
    float* d = dP + static_cast<size_t>(r) * t.ld;
    const V vD(D[r]);
    for (int j = 0; j < t.cols; j += W)
      (V::load_unaligned(p + j) * (V::load_unaligned(d + j) - vD)).store_unaligned(d + j);
  }
}

template <class Arch>
void attention_delta_rows(float* D, const float* dO, const float* O, int ld, int rows, int hs) {
  using V = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(V::size);
  for (int r = 0; r < rows; ++r) {
    const float *a = dO + static_cast<size_t>(r) * ld, *o = O + static_cast<size_t>(r) * ld;
    V acc(0.f);
    int i = 0;
    for (; i + W <= hs; i += W) acc = xsimd::fma(V::load_unaligned(a + i), V::load_unaligned(o + i), acc);
    float d = xsimd::hadd(acc);
    for (; i < hs; ++i) d += a[i] * o[i];
    D[r] = d;
  }
}

}  // namespace qkv::kernels
