// Row-wise kernels against plain double-precision formulas. The fused ones (LayerNorm with the residual
// add, bias + activation, softmax cross-entropy with its gradient, Adam(W) over ranges, the gradient norm) run
// on every instruction set here and scalar, at 1 and 2 threads, on row widths below, at and above the vector
// widths (1, 3, 17, 64, 67, 257, 1000) and row counts up past the threading threshold, with the in-place
// aliasing the layers use and hard inputs (a large mean, a huge logit, ignored rows, exact zeros for ReLU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::rowwise_test {
namespace {

constexpr int kWidths[] = {1, 3, 17, 64, 67, 257, 1000};
// 130 rows of the two widest widths pass the kernels' threading threshold (32K floats).
constexpr int kRowCounts[] = {1, 5, 130};
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// fn() on every instruction set here (scalar included), at 1 and 2 threads.
template <class F>
void for_each_isa_and_threads(F&& fn) {
  const int before = num_threads();
  for (int threads : {1, 2}) {
    if (threads > max_threads()) continue;
    set_num_threads(threads);
    test::for_each_isa([&](const std::string& isa) {
      SCOPED_TRACE("isa " + isa + ", threads " + std::to_string(threads));
      fn();
    });
  }
  set_num_threads(before);
}

template <class F>
void for_each_shape(F&& fn) {
  for (int C : kWidths)
    for (int rows : kRowCounts) {
      SCOPED_TRACE("rows " + std::to_string(rows) + ", width " + std::to_string(C));
      fn(rows, C);
    }
}

// got[i] against want[i] within atol + rtol * scale[i] (scale: |want[i]| when empty). On failure: how many
// differ, the first one and the largest difference.
::testing::AssertionResult all_near(const char* what, std::span<const float> got, const std::vector<double>& want,
                                    double atol, double rtol, const std::vector<double>& scale = {}) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size " << got.size();
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= atol + rtol * (scale.empty() ? std::abs(want[i]) : scale[i])) && bad++ == 0) first = i;
    if (!(err <= worst)) worst = err;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " differ; first [" << first
                                       << "] = " << got[first] << ", expected " << want[first] << "; max |diff| "
                                       << worst;
}

// ---- LayerNorm, with the residual add fused in ----

struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};

LayerNormRef layernorm_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                           int rows, int C) {
  LayerNormRef r{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (int row = 0; row < rows; ++row) {
    const float* xr = x.data() + static_cast<size_t>(row) * C;
    double m = 0, v = 0;
    for (int i = 0; i < C; ++i) m += xr[i];
    m /= C;
    for (int i = 0; i < C; ++i) v += (xr[i] - m) * (xr[i] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int i = 0; i < C; ++i) r.y[static_cast<size_t>(row) * C + i] = (xr[i] - m) * s * w[i] + b[i];
    r.mean[row] = m;
    r.rstd[row] = s;
  }
  return r;
}

TEST(FusedLayerNorm, ForwardAloneAndAfterTheResidualAddMatchesDoubleFormula) {
  for_each_shape([](int rows, int C) {
    const size_t n = static_cast<size_t>(rows) * C;
    auto x = test::randn(n, C, 3.f);
    for (float& v : x) v += 10.f;  // a large mean: the variance must not cancel
    const auto f = test::randn(n, C + 7), w = test::randn(C, C + 1), b = test::randn(C, C + 2);
    std::vector<float> sum(n);  // the residual sum the kernel must write: one float add
    for (size_t i = 0; i < n; ++i) sum[i] = x[i] + f[i];
    const LayerNormRef ref = layernorm_ref(sum, w, b, rows, C);
    const auto check = [&](const char* what, const std::vector<float>& y, const std::vector<float>& mean,
                           const std::vector<float>& rstd) {
      SCOPED_TRACE(what);
      EXPECT_TRUE(all_near("mean", mean, ref.mean, 1e-6, 2e-6));
      EXPECT_TRUE(all_near("rstd", rstd, ref.rstd, 0, 2e-5));
      EXPECT_TRUE(all_near("y", y, ref.y, 2e-5, 1e-5));
    };
    for_each_isa_and_threads([&] {
      std::vector<float> y(n, kNaN), mean(rows, kNaN), rstd(rows, kNaN), r(n, kNaN);
      kernels::layernorm_forward(y, mean, rstd, sum, w, b, rows, C);
      check("layernorm_forward", y, mean, rstd);
      std::fill(y.begin(), y.end(), kNaN);
      kernels::residual_layernorm_forward(r, y, mean, rstd, x, f, w, b, rows, C);
      EXPECT_EQ(r, sum);
      check("residual_layernorm_forward", y, mean, rstd);
      // In place, as a stream updated by its sublayer: r aliases x.
      auto stream = x;
      std::fill(y.begin(), y.end(), kNaN);
      kernels::residual_layernorm_forward(stream, y, mean, rstd, stream, f, w, b, rows, C);
      EXPECT_EQ(stream, sum);
      check("residual_layernorm_forward, r = x", y, mean, rstd);
    });
  });
}

TEST(FusedLayerNorm, BackwardAddsTheResidualGradientAndAccumulatesParameters) {
  for_each_shape([](int rows, int C) {
    const size_t n = static_cast<size_t>(rows) * C;
    auto x = test::randn(n, C, 3.f);
    for (float& v : x) v += 10.f;
    const auto w = test::randn(C, C + 1), b = test::randn(C, C + 2), dy = test::randn(n, C + 3),
               dr = test::randn(n, C + 4), dw0 = test::randn(C, C + 5), db0 = test::randn(C, C + 6);
    // The saved statistics as the forward would give them, then the formula in double from those floats.
    const LayerNormRef stats = layernorm_ref(x, w, b, rows, C);
    const std::vector<float> mean(stats.mean.begin(), stats.mean.end()), rstd(stats.rstd.begin(), stats.rstd.end());
    std::vector<double> d(n), d_scale(n), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
    std::vector<double> dw_scale(C), db_scale(C);
    for (int i = 0; i < C; ++i) dw_scale[i] = std::abs(dw0[i]), db_scale[i] = std::abs(db0[i]);
    for (int row = 0; row < rows; ++row) {
      const size_t o = static_cast<size_t>(row) * C;
      const double m = mean[row], s = rstd[row];
      double mg = 0, mgx = 0;
      for (int i = 0; i < C; ++i) {
        mg += static_cast<double>(dy[o + i]) * w[i];
        mgx += static_cast<double>(dy[o + i]) * w[i] * (x[o + i] - m) * s;
      }
      mg /= C;
      mgx /= C;
      for (int i = 0; i < C; ++i) {
        const double xhat = (x[o + i] - m) * s, g = static_cast<double>(dy[o + i]) * w[i];
        d[o + i] = s * (g - mg - xhat * mgx);
        d_scale[o + i] = s * (std::abs(g) + std::abs(mg) + std::abs(xhat * mgx));
        dw[i] += dy[o + i] * xhat;
        db[i] += dy[o + i];
        dw_scale[i] += std::abs(dy[o + i] * xhat);
        db_scale[i] += std::abs(dy[o + i]);
      }
    }
    std::vector<double> with_dr(n), with_dr_scale(n);
    for (size_t i = 0; i < n; ++i) with_dr[i] = dr[i] + d[i], with_dr_scale[i] = std::abs(dr[i]) + d_scale[i];
    const auto check = [&](const char* what, const std::vector<float>& dx, const std::vector<double>& want,
                           const std::vector<double>& scale, const std::vector<float>& gw,
                           const std::vector<float>& gb) {
      SCOPED_TRACE(what);
      EXPECT_TRUE(all_near("dx", dx, want, 1e-6, 1e-5, scale));
      EXPECT_TRUE(all_near("dw", gw, dw, 1e-6, 1e-5, dw_scale));
      EXPECT_TRUE(all_near("db", gb, db, 1e-6, 1e-5, db_scale));
    };
    for_each_isa_and_threads([&] {
      {  // no residual gradient: dx is overwritten
        std::vector<float> dx(n, kNaN), gw = dw0, gb = db0;
        kernels::layernorm_backward(dx, gw, gb, {}, dy, x, w, mean, rstd, rows, C);
        check("dr empty", dx, d, d_scale, gw, gb);
      }
      {  // a separate residual gradient
        std::vector<float> dx(n, kNaN), gw = dw0, gb = db0;
        kernels::layernorm_backward(dx, gw, gb, dr, dy, x, w, mean, rstd, rows, C);
        check("dr separate", dx, with_dr, with_dr_scale, gw, gb);
      }
      {  // dr aliases dx: dx accumulates (the stream's gradient, in place)
        std::vector<float> dx = dr, gw = dw0, gb = db0;
        kernels::layernorm_backward(dx, gw, gb, dx, dy, x, w, mean, rstd, rows, C);
        check("dr = dx", dx, with_dr, with_dr_scale, gw, gb);
      }
    });
  });
}

// ---- bias + activation ----

double act_ref(kernels::Act act, double h) {
  switch (act) {
    case kernels::Act::Identity: return h;
    case kernels::Act::ReLU: return h > 0 ? h : 0;
    case kernels::Act::GELU: return h * 0.5 * (1 + std::erf(h / std::sqrt(2.0)));
    case kernels::Act::GELUTanh: return 0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
  }
  return h;
}

double act_grad_ref(kernels::Act act, double h) {
  switch (act) {
    case kernels::Act::Identity: return 1;
    case kernels::Act::ReLU: return h > 0 ? 1 : 0;
    case kernels::Act::GELU:
      return 0.5 * (1 + std::erf(h / std::sqrt(2.0))) + h * std::exp(-0.5 * h * h) / std::sqrt(2 * M_PI);
    case kernels::Act::GELUTanh: {
      const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (h + 0.044715 * h * h * h));
      return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * c * (1 + 3 * 0.044715 * h * h);
    }
  }
  return 1;
}

const char* name_of(kernels::Act act) {
  switch (act) {
    case kernels::Act::Identity: return "identity";
    case kernels::Act::ReLU: return "relu";
    case kernels::Act::GELU: return "gelu";
    case kernels::Act::GELUTanh: return "gelu_tanh";
  }
  return "?";
}

constexpr kernels::Act kActs[] = {kernels::Act::Identity, kernels::Act::ReLU, kernels::Act::GELU,
                                  kernels::Act::GELUTanh};
bool is_gelu(kernels::Act act) { return act == kernels::Act::GELU || act == kernels::Act::GELUTanh; }

// Pre-activations spread over the interesting range, with exact zeros (ReLU's kink) and far tails; or (small)
// all within [-1, 1], as early in training, where the CPU's GELU takes its branch for vectors of small values
// (rowwise_simd.h, normal_cdf_small and gelu_grad_small), with its edges +-1.
std::vector<float> pre_activations(size_t n, uint64_t seed, bool small = false) {
  auto h = test::randn(n, seed, small ? 0.25f : 3.f);
  if (small)
    for (float& v : h) v = std::clamp(v, -1.f, 1.f);
  const float wide[] = {0.f, -0.f, -10.f, 10.f, -40.f, 6.f}, narrow[] = {0.f, -0.f, 1.f, -1.f, 0.999f, -1e-6f};
  const float* hard = small ? narrow : wide;
  for (size_t i = 0; i < std::min<size_t>(n, 6); ++i) h[i * 7 % n] = hard[i];
  return h;
}

TEST(FusedBiasAct, ForwardAddsTheBiasKeepsItAndActivates) {
  for (auto act : kActs)
    for (bool bias : {true, false})
      for (bool small : {false, true}) {
        SCOPED_TRACE(std::string(name_of(act)) + (bias ? ", bias" : ", no bias") + (small ? ", |h| <= 1" : ""));
        for_each_shape([&](int rows, int N) {
          const size_t n = static_cast<size_t>(rows) * N;
          // The bias shifts small pre-activations by little enough to keep most within [-1, 1].
          const auto h0 = pre_activations(n, N, small), b = test::randn(N, N + 1, small ? 0.01f : 1.f);
          std::vector<float> want_h(n);
          std::vector<double> want_a(n), scale(n);
          for (size_t i = 0; i < n; ++i) {
            want_h[i] = bias ? h0[i] + b[i % N] : h0[i];
            want_a[i] = act_ref(act, want_h[i]);
            scale[i] = std::abs(want_h[i]);
          }
          const CSpan bs = bias ? CSpan(b) : CSpan();
          // Phi (rowwise_simd.h, fitted polynomials) and exp: a few float ulps, relative to h.
          const double tol = is_gelu(act) ? 1e-6 : 0;
          for_each_isa_and_threads([&] {
            std::vector<float> h = h0, a(n, kNaN);
            kernels::bias_act_forward(a, h, bs, act, rows, N);
            EXPECT_EQ(h, want_h);
            EXPECT_TRUE(all_near("a", a, want_a, tol, tol, scale));
            if (act == kernels::Act::Identity) {  // Linear's bias: in place
              std::vector<float> y = h0;
              kernels::bias_act_forward(y, y, bs, act, rows, N);
              EXPECT_EQ(y, want_h);
            }
          });
        });
      }
}

TEST(FusedBiasAct, BackwardWritesDhAndSumsDbInOnePass) {
  for (auto act : kActs)
    for (bool bias : {true, false})
      for (bool small : {false, true}) {
        SCOPED_TRACE(std::string(name_of(act)) + (bias ? ", bias" : ", no bias") + (small ? ", |h| <= 1" : ""));
        for_each_shape([&](int rows, int N) {
          const size_t n = static_cast<size_t>(rows) * N;
          const auto h = pre_activations(n, N, small), da = test::randn(n, N + 1), db0 = test::randn(N, N + 2);
          std::vector<double> want_dh(n), dh_scale(n), want_db(db0.begin(), db0.end()), db_scale(N);
          for (int i = 0; i < N; ++i) db_scale[i] = std::abs(db0[i]);
          for (size_t i = 0; i < n; ++i) {
            want_dh[i] = da[i] * act_grad_ref(act, h[i]);
            dh_scale[i] = std::abs(da[i]) * (1 + std::abs(h[i]));
            want_db[i % N] += want_dh[i];
            db_scale[i % N] += std::abs(want_dh[i]);
          }
          const double tol = is_gelu(act) ? 1e-6 : 0;
          const auto check = [&](const char* what, const std::vector<float>* dh, const std::vector<float>& db) {
            SCOPED_TRACE(what);
            if (dh) {
              EXPECT_TRUE(all_near("dh", *dh, want_dh, tol, tol, dh_scale));
            }
            if (bias) {
              EXPECT_TRUE(all_near("db", db, want_db, 1e-6, 1e-6, db_scale));
            }
          };
          for_each_isa_and_threads([&] {
            std::vector<float> db = db0;
            const Span dbs = bias ? Span(db) : Span();
            std::vector<float> dh(n, kNaN);
            kernels::bias_act_backward(dh, dbs, da, h, act, rows, N);
            check("dh separate", &dh, db);
            std::vector<float> in_place = da;  // FeedForward: the gradient buffer becomes dh
            db = db0;
            kernels::bias_act_backward(in_place, dbs, in_place, h, act, rows, N);
            check("dh = da", &in_place, db);
            if (bias) {  // db alone (Linear's bias gradient)
              db = db0;
              kernels::bias_act_backward({}, dbs, da, h, act, rows, N);
              check("dh empty", nullptr, db);
            }
          });
        });
      }
}

// GELU's tanh form far out, on every instruction set: exactly h or 0, the derivative exactly 1 or 0 (PyTorch's
// float32 gives the same), never NaN for a finite h, even where h^3 overflows; a NaN stays NaN.
TEST(FusedBiasAct, GeluTanhFarOutIsExactAndNeverNaN) {
  const float big[] = {12.f, 40.f, 1e5f, 1e13f, 1e20f, 3e38f};
  std::vector<float> h0;
  for (float v : big) h0.insert(h0.end(), {v, -v});
  h0.push_back(kNaN);
  const int N = static_cast<int>(h0.size());
  for_each_isa_and_threads([&] {
    std::vector<float> h = h0, a(N), dh(N), da(N, 1.f);
    kernels::bias_act_forward(a, h, {}, kernels::Act::GELUTanh, 1, N);
    kernels::bias_act_backward(dh, {}, da, h, kernels::Act::GELUTanh, 1, N);
    for (int i = 0; i + 1 < N; ++i) {
      SCOPED_TRACE("h = " + std::to_string(h0[i]));
      EXPECT_EQ(a[i], h0[i] > 0 ? h0[i] : 0.f);
      EXPECT_EQ(dh[i], h0[i] > 0 ? 1.f : 0.f);
    }
    EXPECT_TRUE(std::isnan(a[N - 1]));
    EXPECT_TRUE(std::isnan(dh[N - 1]));
  });
}

// The tanh form's derivative against central differences of the forward kernel itself (double steps of a
// float function: h spread over [-6, 6], step 1e-2, where the third derivative bounds the error by ~1e-4).
TEST(FusedBiasAct, GeluTanhBackwardMatchesFiniteDifferences) {
  const int N = 257;
  std::vector<float> h(N);
  for (int i = 0; i < N; ++i) h[i] = -6.f + 12.f * static_cast<float>(i) / (N - 1);
  const float step = 1e-2f;
  std::vector<float> hp(N), hm(N), ap(N), am(N), dh(N), ones(N, 1.f);
  for (int i = 0; i < N; ++i) hp[i] = h[i] + step, hm[i] = h[i] - step;
  for_each_isa_and_threads([&] {
    kernels::bias_act_forward(ap, hp, {}, kernels::Act::GELUTanh, 1, N);
    kernels::bias_act_forward(am, hm, {}, kernels::Act::GELUTanh, 1, N);
    kernels::bias_act_backward(dh, {}, ones, h, kernels::Act::GELUTanh, 1, N);
    for (int i = 0; i < N; ++i) {
      const double fd = (static_cast<double>(ap[i]) - am[i]) / (static_cast<double>(hp[i]) - hm[i]);
      EXPECT_NEAR(dh[i], fd, 2e-4) << "h = " << h[i];
    }
  });
}

// ---- softmax cross-entropy, loss alone or with its gradient ----

TEST(FusedCrossEntropy, LossAndGradientMatchLogSoftmaxWithSmoothingAndIgnoredRows) {
  const int ignore = -100;
  const float scale = 0.5f;
  for (float eps : {0.f, 0.1f}) {
    SCOPED_TRACE("smoothing " + std::to_string(eps));
    for_each_shape([&](int rows, int V) {
      const size_t n = static_cast<size_t>(rows) * V;
      auto z = test::randn(n, V, 4.f);
      z[0] = 1e4f;  // a huge logit: naive exp would overflow
      std::vector<int32_t> t(rows);
      for (int r = 0; r < rows; ++r) t[r] = (r * 7) % V;
      if (rows > 2) t[2] = ignore;
      std::vector<double> want_loss(rows), want_d(n);
      for (int r = 0; r < rows; ++r) {
        if (t[r] == ignore) continue;  // loss 0, gradient 0
        const float* zr = z.data() + static_cast<size_t>(r) * V;
        double mx = zr[0], s = 0, all = 0;
        for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(zr[i]));
        for (int i = 0; i < V; ++i) s += std::exp(zr[i] - mx);
        const double lse = std::log(s) + mx;
        for (int i = 0; i < V; ++i) all += lse - zr[i];
        want_loss[r] = (1 - eps) * (lse - zr[t[r]]) + eps / V * all;
        for (int i = 0; i < V; ++i)
          want_d[static_cast<size_t>(r) * V + i] =
              scale * (std::exp(zr[i] - mx) / s - (1 - eps) * (i == t[r]) - eps / V);
      }
      for_each_isa_and_threads([&] {
        std::vector<float> loss(rows, kNaN);
        kernels::crossentropy_forward(loss, z, t.data(), rows, V, ignore, eps);
        EXPECT_TRUE(all_near("loss", loss, want_loss, 1e-6, 1e-5));
        if (rows > 2) {
          EXPECT_EQ(loss[2], 0.f);
        }
        std::vector<float> loss2(rows, kNaN), d(n, kNaN);
        kernels::crossentropy_forward_backward(loss2, d, z, t.data(), scale, rows, V, ignore, eps);
        EXPECT_EQ(loss2, loss);
        EXPECT_TRUE(all_near("dlogits", d, want_d, 1e-6, 1e-5));
        // In place, as the training step does: the logits become their gradient.
        std::vector<float> zd = z, loss3(rows, kNaN);
        kernels::crossentropy_forward_backward(loss3, zd, zd, t.data(), scale, rows, V, ignore, eps);
        EXPECT_EQ(loss3, loss);
        EXPECT_TRUE(all_near("dlogits in place", zd, want_d, 1e-6, 1e-5));
        for (int i = 0; rows > 2 && i < V; ++i) ASSERT_EQ(zd[2 * static_cast<size_t>(V) + i], 0.f);
      });
    });
  }
}

TEST(FusedCrossEntropy, AllRowsIgnoredGiveZeroLossAndGradient) {
  const int rows = 3, V = 67;
  auto z = test::randn(rows * V, 1);
  const std::vector<int32_t> t(rows, 0);
  std::vector<float> loss(rows, kNaN);
  test::for_each_isa([&](const std::string&) {
    kernels::crossentropy_forward_backward(loss, z, z, t.data(), 1.f, rows, V, 0, 0.1f);
    for (float l : loss) EXPECT_EQ(l, 0.f);
    for (float d : z) ASSERT_EQ(d, 0.f);
  });
}

// ---- Adam(W) in one pass over ranges, the gradient norm ----

TEST(FusedAdam, OnePassOverRangesMatchesTorchFormulasWithClippingAndBothDecays) {
  // Three chunks of the kernel's 16K, ranges cut across them, and two gaps that must stay untouched.
  const size_t n = 40000;
  const std::vector<kernels::AdamRange> ranges = {{0, 100, 0.1f}, {116, 20000, 0.f}, {20000, 39990, 0.1f}};
  const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8;
  for (bool decoupled : {true, false})
    for (float grad_scale : {1.f, 0.37f}) {
      SCOPED_TRACE(std::string(decoupled ? "AdamW" : "Adam") + ", grad_scale " + std::to_string(grad_scale));
      const auto p0 = test::randn(n, 1), g = test::randn(n, 2);
      std::vector<double> pd(p0.begin(), p0.end()), md(n), vd(n);
      for (int t = 1; t <= 5; ++t) {
        for (const auto& r : ranges)
          for (size_t i = r.begin; i < r.end; ++i) {
            double gi = static_cast<double>(g[i]) * grad_scale;
            if (decoupled)
              pd[i] -= lr * r.weight_decay * pd[i];
            else
              gi += r.weight_decay * pd[i];
            md[i] = b1 * md[i] + (1 - b1) * gi;
            vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
            pd[i] -= lr * (md[i] / (1 - std::pow(b1, t))) / (std::sqrt(vd[i] / (1 - std::pow(b2, t))) + eps);
          }
      }
      for_each_isa_and_threads([&] {
        std::vector<float> p = p0, m(n), v(n);
        for (int t = 1; t <= 5; ++t)
          kernels::adam_step(p, m, v, g, ranges,
                             {float(lr), float(b1), float(b2), float(eps), decoupled, t, grad_scale});
        EXPECT_TRUE(all_near("p", p, pd, 1e-5, 0));
        EXPECT_TRUE(all_near("m", m, md, 1e-6, 1e-5));
        EXPECT_TRUE(all_near("v", v, vd, 1e-7, 1e-5));
        for (size_t i : {size_t{100}, size_t{115}, size_t{39990}, n - 1})
          EXPECT_TRUE(p[i] == p0[i] && m[i] == 0.f && v[i] == 0.f) << "element " << i << " is outside every range";
      });
    }
}

TEST(FusedAdam, SumOfSquaresMatchesDouble) {
  for_each_isa_and_threads([] {
    for (size_t n : {0, 1, 17, 1000, 16384, 50000, 100003}) {
      const auto x = test::randn(n, n + 1);
      double want = 0;
      for (float v : x) want += static_cast<double>(v) * v;
      EXPECT_NEAR(kernels::sum_squares(x), want, 1e-6 * want) << "n=" << n;
    }
  });
}

// Parameter-gradient sums are split by fixed blocks (rows or columns), never by thread: the result must be
// bit-identical at 1 and 2 threads.
TEST(FusedDeterminism, ParameterGradientSumsDoNotDependOnTheThreadCount) {
  if (max_threads() < 2) GTEST_SKIP() << "a single-threaded build";
  const int rows = 130, C = 1000;
  const size_t n = static_cast<size_t>(rows) * C;
  const auto x = test::randn(n, 1), w = test::randn(C, 2), b = test::randn(C, 3), dy = test::randn(n, 4);
  const int before = num_threads();
  test::for_each_isa([&](const std::string& isa) {
    SCOPED_TRACE(isa);
    std::vector<float> results[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float> y(n), mean(rows), rstd(rows), dx(n), dw(C), db(C), dh(n), dbias(C);
      kernels::layernorm_forward(y, mean, rstd, x, w, b, rows, C);
      kernels::layernorm_backward(dx, dw, db, {}, dy, x, w, mean, rstd, rows, C);
      kernels::bias_act_backward(dh, dbias, dy, x, kernels::Act::GELU, rows, C);
      auto& out = results[threads - 1];
      for (const auto* v : {&dw, &db, &dbias}) out.insert(out.end(), v->begin(), v->end());
      out.push_back(static_cast<float>(kernels::sum_squares(dy)));
    }
    EXPECT_EQ(results[0], results[1]);
  });
  set_num_threads(before);
}

// ---- the other row-wise kernels ----

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
}  // namespace qkv::rowwise_test
