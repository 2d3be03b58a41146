// Row-wise kernels against plain double-precision formulas, on ragged sizes and hard inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "test_util.h"

namespace qkv {
namespace {

TEST(LayerNorm, ForwardMatchesDoubleFormula) {
  for (int C : {1, 3, 8, 17, 64, 129}) {
    const int rows = 5;
    auto x = test::randn(static_cast<size_t>(rows) * C, C, 3.f);
    for (float& v : x) v += 10.f;  // a large mean: the two-pass variance must not cancel
    auto w = test::randn(C, C + 1), b = test::randn(C, C + 2);
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    kernels::layernorm_forward(y, mean, rstd, x, w, b, rows, C);
    for (int r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (int i = 0; i < C; ++i) m += x[r * C + i];
      m /= C;
      for (int i = 0; i < C; ++i) v += (x[r * C + i] - m) * (x[r * C + i] - m);
      v /= C;
      const double s = 1.0 / std::sqrt(v + 1e-5);
      EXPECT_NEAR(mean[r], m, 1e-5 * std::abs(m) + 1e-6);
      EXPECT_NEAR(rstd[r], s, 1e-4 * s);
      for (int i = 0; i < C; ++i)
        ASSERT_NEAR(y[r * C + i], (x[r * C + i] - m) * s * w[i] + b[i], 1e-4) << "C=" << C << " r=" << r;
    }
  }
}

TEST(Gelu, MatchesErfFormulaAndDerivative) {
  std::vector<float> x;
  for (float v = -8.f; v <= 8.f; v += 0.37f) x.push_back(v);
  std::vector<float> y(x.size()), dx(x.size()), dy(x.size(), 1.f);
  kernels::gelu_forward(y, x);
  kernels::gelu_backward(dx, dy, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(y[i], v * cdf, 1e-5 + 1e-6 * std::abs(v));
    EXPECT_NEAR(dx[i], cdf + v * pdf, 1e-5);
  }
}

TEST(CrossEntropy, MatchesLogSoftmaxEvenForHugeLogits) {
  const int rows = 4;
  for (int V : {1, 2, 5, 65, 300}) {
    auto z = test::randn(static_cast<size_t>(rows) * V, V, 4.f);
    z[0] = 1e4f;  // a huge logit: naive exp would overflow
    std::vector<int32_t> t(rows);
    for (int r = 0; r < rows; ++r) t[r] = (r * 7) % V;
    std::vector<float> loss(rows), p(z.size()), d(z.size());
    kernels::crossentropy_forward(loss, p, z, t.data(), rows, V);
    kernels::crossentropy_backward(d, p, t.data(), 0.5f, rows, V);
    for (int r = 0; r < rows; ++r) {
      double mx = -1e30, s = 0;
      for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(z[r * V + i]));
      for (int i = 0; i < V; ++i) s += std::exp(z[r * V + i] - mx);
      const double ref = std::log(s) + mx - z[r * V + t[r]];
      ASSERT_TRUE(std::isfinite(loss[r]));
      EXPECT_NEAR(loss[r], ref, 1e-4 * std::max(1.0, std::abs(ref)));
      for (int i = 0; i < V; ++i) {
        const double pr = std::exp(z[r * V + i] - mx) / s;
        EXPECT_NEAR(p[r * V + i], pr, 1e-6);
        EXPECT_NEAR(d[r * V + i], 0.5 * (pr - (i == t[r])), 1e-6);
      }
    }
  }
}

TEST(Attention, ForwardMatchesDoubleReferenceWithCausalMask) {
  const int B = 2, H = 3, hs = 5, C = H * hs;
  for (int T : {1, 2, 7, 17}) {
    auto qkv = test::randn(static_cast<size_t>(B) * T * 3 * C, T);
    std::vector<float> out(static_cast<size_t>(B) * T * C), att(static_cast<size_t>(B) * H * T * T);
    kernels::attention_forward(out, att, qkv, B, T, C, H);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t) {
          auto at = [&](int tt, int part, int i) {
            return static_cast<double>(qkv[((b * T + tt) * 3 + part) * C + h * hs + i]);
          };
          std::vector<double> s(T, 0.0);
          double mx = -1e30, sum = 0;
          for (int u = 0; u <= t; ++u) {
            for (int i = 0; i < hs; ++i) s[u] += at(t, 0, i) * at(u, 1, i);
            s[u] /= std::sqrt(static_cast<double>(hs));
            mx = std::max(mx, s[u]);
          }
          for (int u = 0; u <= t; ++u) sum += s[u] = std::exp(s[u] - mx);
          for (int u = 0; u < T; ++u) {
            const double p = u <= t ? s[u] / sum : 0.0;
            ASSERT_NEAR(att[((static_cast<size_t>(b) * H + h) * T + t) * T + u], p, 1e-6);
          }
          for (int i = 0; i < hs; ++i) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += s[u] / sum * at(u, 2, i);
            ASSERT_NEAR(out[(static_cast<size_t>(b) * T + t) * C + h * hs + i], o, 1e-5);
          }
        }
  }
}

TEST(AdamW, MatchesTorchFormulaOverSteps) {
  const size_t n = 37;
  auto p = test::randn(n, 1), g = test::randn(n, 2);
  std::vector<float> m(n), v(n);
  std::vector<double> pd(p.begin(), p.end()), md(n), vd(n);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
  for (int t = 1; t <= 5; ++t) {
    kernels::adamw_step(p, m, v, g, float(lr), float(b1), float(b2), float(eps), float(wd), t);
    for (size_t i = 0; i < n; ++i) {
      pd[i] -= lr * wd * pd[i];
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * double(g[i]) * g[i];
      pd[i] -= lr * (md[i] / (1 - std::pow(b1, t))) / (std::sqrt(vd[i] / (1 - std::pow(b2, t))) + eps);
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pd[i], 1e-5);
}

TEST(Embedding, ForwardAddsRowsAndBackwardScatters) {
  const int B = 2, T = 3, C = 4, V = 5;
  auto wte = test::randn(V * C, 1), wpe = test::randn(T * C, 2);
  const int32_t tok[] = {4, 0, 4, 1, 1, 2};
  std::vector<float> x(B * T * C), dwte(V * C), dwpe(T * C);
  kernels::embedding_forward(x, tok, wte, wpe, B, T, C);
  for (int r = 0; r < B * T; ++r)
    for (int i = 0; i < C; ++i) EXPECT_FLOAT_EQ(x[r * C + i], wte[tok[r] * C + i] + wpe[(r % T) * C + i]);
  std::vector<float> dx(B * T * C, 1.f);
  kernels::embedding_backward(dwte, dwpe, dx, tok, B, T, C);
  EXPECT_FLOAT_EQ(dwte[4 * C], 2.f);  // token 4 appears twice
  EXPECT_FLOAT_EQ(dwte[3 * C], 0.f);  // token 3 never
  EXPECT_FLOAT_EQ(dwpe[0], 2.f);      // position 0 in both rows
}

}  // namespace
}  // namespace qkv
