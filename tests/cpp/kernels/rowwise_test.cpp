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

TEST(CrossEntropy, MatchesLogSoftmaxWithSmoothingAndIgnoredRows) {
  const int rows = 4, ignore = -100;
  for (float eps : {0.f, 0.1f})
    for (int V : {1, 2, 5, 65, 300}) {
      auto z = test::randn(static_cast<size_t>(rows) * V, V, 4.f);
      z[0] = 1e4f;  // a huge logit: naive exp would overflow
      std::vector<int32_t> t(rows);
      for (int r = 0; r < rows; ++r) t[r] = (r * 7) % V;
      t[2] = ignore;
      std::vector<float> loss(rows), p(z.size()), d(z.size());
      kernels::crossentropy_forward(loss, p, z, t.data(), rows, V, ignore, eps);
      kernels::crossentropy_backward(d, p, t.data(), 0.5f, rows, V, ignore, eps);
      for (int r = 0; r < rows; ++r) {
        double mx = -1e30, s = 0;
        for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(z[r * V + i]));
        for (int i = 0; i < V; ++i) s += std::exp(z[r * V + i] - mx);
        const double lse = std::log(s) + mx;
        if (t[r] == ignore) {
          EXPECT_EQ(loss[r], 0.f);
          for (int i = 0; i < V; ++i) EXPECT_EQ(d[r * V + i], 0.f);
          continue;
        }
        double all = 0;
        for (int i = 0; i < V; ++i) all += lse - z[r * V + i];
        const double ref = (1 - eps) * (lse - z[r * V + t[r]]) + eps / V * all;
        ASSERT_TRUE(std::isfinite(loss[r]));
        EXPECT_NEAR(loss[r], ref, 1e-4 * std::max(1.0, std::abs(ref))) << "V=" << V << " eps=" << eps;
        for (int i = 0; i < V; ++i) {
          const double pr = std::exp(z[r * V + i] - mx) / s;
          EXPECT_NEAR(p[r * V + i], pr, 1e-6);
          EXPECT_NEAR(d[r * V + i], 0.5 * (pr - (1 - eps) * (i == t[r]) - eps / V), 1e-6);
        }
      }
    }
}

TEST(Dropout, KeepsAboutOneMinusPScalesAndReplaysTheMask) {
  const size_t n = 20000;
  std::vector<float> x(n, 1.f), y(n), dx(n);
  kernels::dropout_forward(y, x, 0.25f, 99);
  size_t kept = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.f || std::abs(v - 1.f / 0.75f) < 1e-6f);
    kept += v != 0.f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.01);
  kernels::dropout_backward(dx, x, 0.25f, 99);  // the same mask from the same seed
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(dx[i], y[i]);
  kernels::dropout_forward(dx, x, 0.25f, 100);  // another seed, another mask
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += (dx[i] == 0.f) == (y[i] == 0.f);
  EXPECT_LT(same, n * 0.7);
}

TEST(Relu, ForwardAndBackward) {
  const std::vector<float> x = {-2.f, -0.f, 0.f, 0.5f, 3.f};
  std::vector<float> y(x.size()), dx(x.size()), dy(x.size(), 2.f);
  kernels::relu_forward(y, x);
  kernels::relu_backward(dx, dy, x);
  EXPECT_EQ(y, (std::vector<float>{0.f, 0.f, 0.f, 0.5f, 3.f}));
  EXPECT_EQ(dx, (std::vector<float>{0.f, 0.f, 0.f, 2.f, 2.f}));
}

TEST(Sinusoidal, MatchesThePaperFormula) {
  const int T = 50, C = 12;
  std::vector<float> pe(T * C);
  kernels::sinusoidal_positions(pe, T, C);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < C; ++i) {
      const double a = t / std::pow(10000.0, (i / 2 * 2) / static_cast<double>(C));
      EXPECT_NEAR(pe[t * C + i], i % 2 == 0 ? std::sin(a) : std::cos(a), 2e-5) << "t=" << t << " i=" << i;
    }
}

TEST(Adam, MatchesTorchFormulasOverStepsForAdamAndAdamW) {
  for (bool decoupled : {true, false}) {
    const size_t n = 37;
    auto p = test::randn(n, 1), g = test::randn(n, 2);
    std::vector<float> m(n), v(n);
    std::vector<double> pd(p.begin(), p.end()), md(n), vd(n);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 5; ++t) {
      kernels::adam_step(p, m, v, g, float(lr), float(b1), float(b2), float(eps), float(wd), decoupled, t);
      for (size_t i = 0; i < n; ++i) {
        double gi = g[i];
        if (decoupled)
          pd[i] -= lr * wd * pd[i];
        else
          gi += wd * pd[i];
        md[i] = b1 * md[i] + (1 - b1) * gi;
        vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
        pd[i] -= lr * (md[i] / (1 - std::pow(b1, t))) / (std::sqrt(vd[i] / (1 - std::pow(b2, t))) + eps);
      }
    }
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pd[i], 1e-5) << (decoupled ? "AdamW" : "Adam");
  }
}

TEST(Embedding, ForwardAddsRowsAndBackwardScatters) {
  const int B = 2, T = 3, C = 4, V = 5;
  auto wte = test::randn(V * C, 1), wpe = test::randn(T * C, 2);
  const int32_t tok[] = {4, 0, 4, 1, 1, 2};
  std::vector<float> x(B * T * C), dwte(V * C), dwpe(T * C);
  kernels::embedding_forward(x, tok, wte, wpe, 2.f, B, T, C);
  for (int r = 0; r < B * T; ++r)
    for (int i = 0; i < C; ++i) EXPECT_FLOAT_EQ(x[r * C + i], 2.f * wte[tok[r] * C + i] + wpe[(r % T) * C + i]);
  std::vector<float> dx(B * T * C, 1.f);
  kernels::embedding_backward(dwte, dwpe, dx, tok, 2.f, B, T, C);
  EXPECT_FLOAT_EQ(dwte[4 * C], 4.f);  // token 4 appears twice, scale 2
  EXPECT_FLOAT_EQ(dwte[3 * C], 0.f);  // token 3 never
  EXPECT_FLOAT_EQ(dwpe[0], 2.f);      // position 0 in both rows
}

}  // namespace
}  // namespace qkv
