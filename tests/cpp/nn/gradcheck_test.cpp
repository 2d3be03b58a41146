// Every layer's backward against central finite differences of its forward.
//
// The scalar checked is L = sum(r * y) for a fixed random r, so the analytic gradients come from
// backward(dy = r). Differences are taken in float32 with h = 1e-2 and L summed in double; the tolerance
// (1e-2 relative + 2e-3 absolute) is far below the error any wrong term would make.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/feed_forward.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/transformer_layer.h"
#include "qkv/language_model.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::gradcheck_test {
namespace {

constexpr float kH = 1e-2f;
// ReLU layers: a step of 1e-2 often straddles the kink at 0 of some unit, where the function is not
// differentiable; 1e-3 straddles far fewer and float32 rounding still stays well inside the tolerance.
constexpr float kHRelu = 1e-3f;
constexpr double kRtol = 1e-2, kAtol = 2e-3;

// Compares `analytic` with finite differences of loss() with respect to `values`, at up to 24 spread
// coordinates.
void check_grad(const std::string& what, Span values, CSpan analytic, const std::function<double()>& loss,
                float h = kH) {
  ASSERT_EQ(values.size(), analytic.size()) << what;
  const size_t n = values.size(), samples = std::min<size_t>(n, 24);
  double max_abs = 0;
  for (float g : analytic) max_abs = std::max(max_abs, std::abs(static_cast<double>(g)));
  for (size_t s = 0; s < samples; ++s) {
    const size_t i = s * n / samples + (s * 7) % std::max<size_t>(1, n / samples);
    const float orig = values[i];
    values[i] = orig + h;
    const double lp = loss();
    values[i] = orig - h;
    const double lm = loss();
    values[i] = orig;
    const double fd = (lp - lm) / (2.0 * h);
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
// forward(y, x) and backward(dx, dy, x); dx is zeroed before backward.
void check_layer(const std::string& name, nn::Parameters& params, size_t nx, size_t ny,
                 const std::function<void(Span, CSpan)>& forward,
                 const std::function<void(Span, CSpan, CSpan)>& backward, float h = kH) {
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
  check_grad(name + " dx", x, dx, loss, h);
  for (auto& p : params.all()) {
    const std::vector<float> g(p.grad.begin(), p.grad.end());  // copy: loss() does not touch grads, but be plain
    check_grad(name + " d" + p.name, p.value, g, loss, h);
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
      [&](Span dx, CSpan dy, CSpan x) { ln.backward(dx, {}, dy, x, rows); });
}

// Key padding for a batch of 2 over Tk keys: batch 1 has its last `padded` keys masked.
std::vector<uint8_t> key_pad(int Tk, int padded) {
  std::vector<uint8_t> pad(2 * static_cast<size_t>(Tk), 0);
  for (int s = Tk - padded; s < Tk; ++s) pad[Tk + s] = 1;
  return pad;
}

TEST(GradCheck, SelfAttentionCausalAndPadded) {
  for (bool bias : {true, false}) {
    nn::Parameters params;
    const int B = 2, T = 5, C = 8, H = 2;
    nn::MultiHeadAttention attn(params, "attn", C, H, bias, 0.3f, 0.3f);
    randomize(params, 3, 0.3f);
    Workspace ws;
    ws.plan([&](Workspace& w) { attn.plan(w, B, T, T); });
    const auto pad = key_pad(T, 2);
    const nn::AttentionMask mask{pad.data(), true};
    check_layer(
        bias ? "attention" : "attention (no bias)", params, B * T * C, B * T * C,
        [&](Span y, CSpan x) { attn.forward(y, x, x, mask, B, T, T, {}); },
        [&](Span dx, CSpan dy, CSpan x) { attn.backward(dx, dx, dy, x, x, mask, B, T, T, {}); });
  }
}

// Cross-attention: the query input and the memory get their own gradients.
TEST(GradCheck, CrossAttentionWithMemoryPadding) {
  nn::Parameters params;
  const int B = 2, Tq = 4, Tk = 6, C = 8, H = 4;
  nn::MultiHeadAttention attn(params, "attn", C, H, true, 0.3f, 0.3f);
  randomize(params, 4, 0.3f);
  Workspace ws;
  ws.plan([&](Workspace& w) { attn.plan(w, B, Tq, Tk); });
  const auto pad = key_pad(Tk, 3);
  const nn::AttentionMask mask{pad.data(), false};
  auto mem = test::randn(B * Tk * C, 21);
  std::vector<float> dmem(mem.size());
  check_layer(
      "cross-attention", params, B * Tq * C, B * Tq * C,
      [&](Span y, CSpan x) { attn.forward(y, x, mem, mask, B, Tq, Tk, {}); },
      [&](Span dx, CSpan dy, CSpan x) {
        std::fill(dmem.begin(), dmem.end(), 0.f);
        attn.backward(dx, dmem, dy, x, mem, mask, B, Tq, Tk, {});
      });
  // d memory, by finite differences of the same scalar.
  auto x = test::randn(B * Tq * C, 11);
  auto r = test::randn(B * Tq * C, 12);
  std::vector<float> y(r.size()), dx(x.size());
  attn.forward(y, x, mem, mask, B, Tq, Tk, {});
  std::fill(dmem.begin(), dmem.end(), 0.f);
  attn.backward(dx, dmem, r, x, mem, mask, B, Tq, Tk, {});
  check_grad("cross-attention dmemory", mem, dmem, [&] {
    attn.forward(y, x, mem, mask, B, Tq, Tk, {});
    return dot(y, r);
  });
}

TEST(GradCheck, FeedForwardReluAndGelu) {
  for (Activation act : {Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
    nn::Parameters params;
    const int rows = 6, C = 5, F = 11;
    nn::FeedForward ffn(params, "", C, F, act, true, 0.4f, 0.4f);
    randomize(params, 4, 0.4f);
    Workspace ws;
    ws.plan([&](Workspace& w) { ffn.plan(w, rows); });
    check_layer(
        "ffn " + to_string(act), params, rows * C, rows * C, [&](Span y, CSpan x) { ffn.forward(y, x, rows, {}); },
        [&](Span dx, CSpan dy, CSpan x) { ffn.backward(dx, dy, x, rows, {}); }, act == Activation::ReLU ? kHRelu : kH);
  }
}

// With dropout on, forward and backward must use the same masks: the finite differences see the same
// (fixed-seed) masks as the analytic gradient.
TEST(GradCheck, FeedForwardWithDropoutReplaysItsMask) {
  nn::Parameters params;
  const int rows = 6, C = 5, F = 11;
  nn::FeedForward ffn(params, "", C, F, Activation::GELU, true, 0.4f, 0.4f);
  randomize(params, 5, 0.4f);
  Workspace ws;
  ws.plan([&](Workspace& w) { ffn.plan(w, rows); });
  const nn::Dropout drop{0.3f, 1234};
  check_layer(
      "ffn dropout", params, rows * C, rows * C, [&](Span y, CSpan x) { ffn.forward(y, x, rows, drop); },
      [&](Span dx, CSpan dy, CSpan x) { ffn.backward(dx, dy, x, rows, drop); });
}

TEST(GradCheck, EncoderLayerPostAndPreLnWithDropout) {
  for (NormPosition norm : {NormPosition::Post, NormPosition::Pre}) {
    nn::Parameters params;
    const int B = 2, T = 4, C = 8, H = 4, F = 12;
    nn::EncoderLayer layer(params, "layers.0.", {C, H, F, Activation::GELU, norm, true, 0.3f, 0.3f});
    randomize(params, 5, 0.3f);
    Workspace ws;
    ws.plan([&](Workspace& w) { layer.plan(w, B, T); });
    const auto pad = key_pad(T, 1);
    const nn::AttentionMask mask{pad.data(), norm == NormPosition::Pre};
    const nn::Dropout drop{0.2f, 77};
    check_layer(
        "encoder layer " + to_string(norm), params, B * T * C, B * T * C,
        [&](Span y, CSpan x) { layer.forward(y, x, mask, B, T, drop); },
        [&](Span dx, CSpan dy, CSpan x) { layer.backward(dx, dy, x, mask, B, T, drop); });
  }
}

TEST(GradCheck, DecoderLayerPostAndPreLnWithMemoryGradient) {
  for (NormPosition norm : {NormPosition::Post, NormPosition::Pre}) {
    nn::Parameters params;
    const int B = 2, T = 4, S = 5, C = 8, H = 2, F = 12;
    nn::DecoderLayer layer(params, "layers.0.", {C, H, F, Activation::ReLU, norm, true, 0.3f, 0.3f});
    randomize(params, 6, 0.3f);
    Workspace ws;
    ws.plan([&](Workspace& w) { layer.plan(w, B, T, S); });
    const auto tpad = key_pad(T, 1), spad = key_pad(S, 2);
    const nn::AttentionMask self_mask{tpad.data(), true}, mem_mask{spad.data(), false};
    auto mem = test::randn(B * S * C, 31);
    std::vector<float> dmem(mem.size());
    check_layer(
        "decoder layer " + to_string(norm), params, B * T * C, B * T * C,
        [&](Span y, CSpan x) { layer.forward(y, x, mem, self_mask, mem_mask, B, T, S, {}); },
        [&](Span dx, CSpan dy, CSpan x) {
          std::fill(dmem.begin(), dmem.end(), 0.f);
          layer.backward(dx, dmem, dy, x, mem, self_mask, mem_mask, B, T, S, {});
        },
        kHRelu);
    auto x = test::randn(B * T * C, 11);
    auto r = test::randn(B * T * C, 12);
    std::vector<float> y(r.size()), dx(x.size());
    layer.forward(y, x, mem, self_mask, mem_mask, B, T, S, {});
    std::fill(dmem.begin(), dmem.end(), 0.f);
    layer.backward(dx, dmem, r, x, mem, self_mask, mem_mask, B, T, S, {});
    check_grad(
        "decoder layer dmemory", mem, dmem,
        [&] {
          layer.forward(y, x, mem, self_mask, mem_mask, B, T, S, {});
          return dot(y, r);
        },
        kHRelu);
  }
}

TEST(GradCheck, EmbeddingScaledWithLearnedOrSinusoidalPositions) {
  for (Positions pos : {Positions::Learned, Positions::Sinusoidal}) {
    nn::Parameters params;
    const int B = 2, T = 3, C = 4, V = 5;
    nn::Embedding emb(params, "tok_emb.weight", "pos_emb.weight", V, T, C, true, pos, 0.3f);
    randomize(params, 6, 0.3f);
    const int32_t ids[] = {4, 0, 4, 1, 1, 2};
    const ops::Ids tok{ids, ids};  // CPU: the host ids are the device ids
    auto r = test::randn(B * T * C, 13);
    std::vector<float> y(B * T * C), dx = r;
    params.zero_grad();
    emb.backward(dx, tok, B, T, {});
    auto loss = [&] {
      emb.forward(y, tok, B, T, {});
      return dot(y, r);
    };
    for (auto& p : params.all()) {
      const std::vector<float> g(p.grad.begin(), p.grad.end());
      check_grad("embedding d" + p.name, p.value, g, loss);
    }
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
  auto loss = [&] { return lm.evaluate(in, tg, B, T).loss * B * T; };
  for (size_t i = 0; i < params.size(); ++i) {
    // loss() is the summed loss (scaled back from the mean) so differences stay well above rounding.
    std::vector<float> g = grads[i];
    for (float& v : g) v *= B * T;
    check_grad(std::string("lm d") + params[i].name, params[i].value, g, loss);
  }
}

}  // namespace
}  // namespace qkv::gradcheck_test
