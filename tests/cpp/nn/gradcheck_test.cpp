// Every layer's backward against central finite differences of its forward.
//
// The scalar checked is L = sum(r * y) for a fixed random r, so the analytic gradients come from
// backward(dy = r). Differences are taken in float32 with h = 1e-2 and L summed in double; the tolerance
// (1e-2 relative + 2e-3 absolute) is far below the error any wrong term would make.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "nn/attention.h"
#include "nn/block.h"
#include "nn/embedding.h"
#include "nn/feed_forward.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "qkv/language_model.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv {
namespace {

constexpr float kH = 1e-2f;
constexpr double kRtol = 1e-2, kAtol = 2e-3;

// Compares `analytic` with finite differences of loss() with respect to `values`, at up to 24 spread
// coordinates.
void check_grad(const std::string& what, Span values, CSpan analytic, const std::function<double()>& loss) {
  ASSERT_EQ(values.size(), analytic.size()) << what;
  const size_t n = values.size(), samples = std::min<size_t>(n, 24);
  double max_abs = 0;
  for (float g : analytic) max_abs = std::max(max_abs, std::abs(static_cast<double>(g)));
  for (size_t s = 0; s < samples; ++s) {
    const size_t i = s * n / samples + (s * 7) % std::max<size_t>(1, n / samples);
    const float orig = values[i];
    values[i] = orig + kH;
    const double lp = loss();
    values[i] = orig - kH;
    const double lm = loss();
    values[i] = orig;
    const double fd = (lp - lm) / (2.0 * kH);
    EXPECT_NEAR(analytic[i], fd, kAtol + kRtol * std::max(std::abs(fd), 0.1 * max_abs))
        << what << "[" << i << "] analytic vs finite difference";
  }
}

double dot(CSpan a, CSpan b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Sets every parameter to N(0, scale) so LayerNorm weights and biases are not trivial.
void randomize(nn::Parameters& params, uint64_t seed, float scale) {
  params.finalize(seed);
  uint64_t k = seed;
  for (auto& p : params.all()) {
    auto r = test::randn(p.numel, ++k, scale);
    for (size_t i = 0; i < p.numel; ++i) p.value[i] = (p.init == nn::Init::Ones ? 1.f : 0.f) + r[i];
  }
}

// Runs the check for a layer with input x (size nx) and output y (size ny).
// forward(y, x) and backward(dx, dy, x); dx is zeroed before backward (LayerNorm accumulates).
void check_layer(const std::string& name, nn::Parameters& params, size_t nx, size_t ny,
                 const std::function<void(Span, CSpan)>& forward,
                 const std::function<void(Span, CSpan, CSpan)>& backward) {
  auto x = test::randn(nx, 11);
  auto r = test::randn(ny, 12);
  std::vector<float> y(ny), dx(nx, 0.f);
  forward(y, x);
  params.zero_grad();
  backward(dx, r, x);
  auto loss = [&] {
    forward(y, x);
    return dot(y, r);
  };
  check_grad(name + " dx", x, dx, loss);
  for (auto& p : params.all()) {
    const std::vector<float> g(p.grad.begin(), p.grad.end());  // copy: loss() does not touch grads, but be plain
    check_grad(name + " d" + p.name, p.value, g, loss);
  }
}

TEST(GradCheck, Linear) {
  nn::Parameters params;
  nn::Linear lin(params, "w", "b", 6, 5, 0.3f);
  randomize(params, 1, 0.3f);
  const int rows = 7;
  check_layer(
      "linear", params, rows * 6, rows * 5, [&](Span y, CSpan x) { lin.forward(y, x, rows); },
      [&](Span dx, CSpan dy, CSpan x) { lin.backward(dx, dy, x, rows); });
}

TEST(GradCheck, LayerNorm) {
  nn::Parameters params;
  nn::LayerNorm ln(params, "ln", 9);
  randomize(params, 2, 0.3f);
  const int rows = 5;
  Workspace ws;
  ws.plan([&](Workspace& w) { ln.plan(w, rows); });
  check_layer(
      "layernorm", params, rows * 9, rows * 9, [&](Span y, CSpan x) { ln.forward(y, x, rows); },
      [&](Span dx, CSpan dy, CSpan x) { ln.backward(dx, dy, x, rows); });
}

TEST(GradCheck, CausalSelfAttention) {
  nn::Parameters params;
  const int B = 2, T = 5, C = 8, H = 2;
  nn::CausalSelfAttention attn(params, "attn", C, H, 0.3f, 0.3f);
  randomize(params, 3, 0.3f);
  Workspace ws;
  ws.plan([&](Workspace& w) { attn.plan(w, B, T); });
  check_layer(
      "attention", params, B * T * C, B * T * C, [&](Span y, CSpan x) { attn.forward(y, x, B, T); },
      [&](Span dx, CSpan dy, CSpan x) { attn.backward(dx, dy, x, B, T); });
}

TEST(GradCheck, FeedForwardWithGelu) {
  nn::Parameters params;
  const int rows = 6, C = 5, F = 11;
  nn::FeedForward ffn(params, "", C, F, 0.4f, 0.4f);
  randomize(params, 4, 0.4f);
  Workspace ws;
  ws.plan([&](Workspace& w) { ffn.plan(w, rows); });
  check_layer(
      "ffn", params, rows * C, rows * C, [&](Span y, CSpan x) { ffn.forward(y, x, rows); },
      [&](Span dx, CSpan dy, CSpan x) { ffn.backward(dx, dy, x, rows); });
}

TEST(GradCheck, PreLnBlock) {
  nn::Parameters params;
  const int B = 2, T = 4, C = 8, H = 4, F = 12;
  nn::Block block(params, "layers.0.", C, H, F, 0.3f, 0.3f);
  randomize(params, 5, 0.3f);
  Workspace ws;
  ws.plan([&](Workspace& w) { block.plan(w, B, T); });
  check_layer(
      "block", params, B * T * C, B * T * C, [&](Span y, CSpan x) { block.forward(y, x, B, T); },
      [&](Span dx, CSpan dy, CSpan x) { block.backward(dx, dy, x, B, T); });
}

TEST(GradCheck, Embedding) {
  nn::Parameters params;
  const int B = 2, T = 3, C = 4, V = 5;
  nn::Embedding emb(params, V, T, C, 0.3f);
  randomize(params, 6, 0.3f);
  const int32_t tok[] = {4, 0, 4, 1, 1, 2};
  auto r = test::randn(B * T * C, 13);
  std::vector<float> y(B * T * C);
  params.zero_grad();
  emb.backward(r, tok, B, T);
  auto loss = [&] {
    emb.forward(y, tok, B, T);
    return dot(y, r);
  };
  for (auto& p : params.all()) {
    const std::vector<float> g(p.grad.begin(), p.grad.end());
    check_grad("embedding d" + p.name, p.value, g, loss);
  }
}

// The whole model, cross-entropy and tied head included: d(mean loss)/d(every parameter tensor).
TEST(GradCheck, LanguageModelEndToEnd) {
  LanguageModelConfig cfg;
  cfg.vocab_size = 7;
  cfg.context = 6;
  cfg.d_model = 8;
  cfg.heads = 2;
  cfg.layers = 2;
  cfg.d_ff = 12;
  LanguageModel lm(cfg);
  uint64_t k = 100;
  for (auto& p : lm.parameters()) {  // larger weights than the 0.02 init, so every path matters
    auto r = test::randn(p.value.size(), ++k, 0.3f);
    for (size_t i = 0; i < p.value.size(); ++i) p.value[i] += r[i];
  }
  const int B = 2, T = 5;
  const std::vector<int32_t> in = {1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, tg = {2, 3, 4, 5, 6, 0, 1, 2, 3, 4};
  lm.forward_backward(in, tg, B, T);
  auto params = lm.parameters();
  std::vector<std::vector<float>> grads;
  for (auto& p : params) grads.emplace_back(p.grad.begin(), p.grad.end());
  auto loss = [&] { return static_cast<double>(lm.evaluate(in, tg, B, T)) * B * T; };
  for (size_t i = 0; i < params.size(); ++i) {
    // loss() is the summed loss (scaled back from the mean) so differences stay well above rounding.
    std::vector<float> g = grads[i];
    for (float& v : g) v *= B * T;
    check_grad(std::string("lm d") + params[i].name, params[i].value, g, loss);
  }
}

}  // namespace
}  // namespace qkv
