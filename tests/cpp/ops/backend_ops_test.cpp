// Every op of the contract (ops/ops.h) on every executor against the reference executor (ggml's
// test-backend-ops): the CPU executor under each instruction set this machine has (scalar included), and CUDA
// where a GPU is present. A case is one function of a Backend that uploads fixed-seed inputs, runs the op and
// downloads what it wrote; outputs start poisoned with NaN, so an element an executor fails to write fails.
// Adding an op is one function and one line in its TEST.
// Tolerances: exact for data movement, dropout, argmax and the embedding (the same float operations in the
// same order); otherwise |got - want| <= tol * max(1, |want|) element by element, or, for outputs that are
// sums whose terms can cancel (gemm, parameter gradients, LayerNorm's dx = rstd (g - mean g - xhat mean(g xhat))),
// tol * max(1, max |want|) over the output: their rounding is relative to the terms, which cancellation can make
// far larger than the result (tests/cpp/kernels/rowwise_test.cpp bounds LayerNorm's dx by its terms likewise).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/webgpu_loopback.h"
#include "qkv/device.h"
#include "test_util.h"

namespace qkv {
namespace {

using ops::Backend;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Device copies of host data through one backend's own allocate/upload/download; freed at the end.
class Dev {
 public:
  explicit Dev(Backend& be) : be_(be) {}
  ~Dev() {
    for (void* p : owned_) be_.free(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  Span up(const std::vector<float>& h) {
    float* p = static_cast<float*>(alloc(h.size() * sizeof(float)));
    be_.upload(p, h.data(), h.size() * sizeof(float));
    return {p, h.size()};
  }
  Span poisoned(size_t n) { return up(std::vector<float>(n, kNaN)); }
  std::span<int32_t> ints(const std::vector<int32_t>& h) {
    auto* p = static_cast<int32_t*>(alloc(h.size() * sizeof(int32_t)));
    be_.upload(p, h.data(), h.size() * sizeof(int32_t));
    return {p, h.size()};
  }
  const uint8_t* bytes(const std::vector<uint8_t>& h) {
    auto* p = static_cast<uint8_t*>(alloc(h.size()));
    be_.upload(p, h.data(), h.size());
    return p;
  }
  // Token ids as the ops take them: the host copy and the device one.
  ops::Ids ids(const std::vector<int32_t>& h) { return {h, ints(h).data()}; }
  std::vector<float> down(CSpan x) {
    std::vector<float> h(x.size());
    be_.download(h.data(), x.data(), x.size_bytes());
    return h;
  }
  Span scratch(size_t floats) { return floats ? poisoned(floats) : Span{}; }

 private:
  void* alloc(size_t bytes) {
    void* p = be_.allocate(std::max<size_t>(bytes, 4));
    owned_.push_back(p);
    return p;
  }
  Backend& be_;
  std::vector<void*> owned_;
};

enum class Tol { Exact, Element, Norm };
struct Output {
  std::string name;
  std::vector<float> values;
  Tol mode;
  double tol;
};
using Outputs = std::vector<Output>;
using Case = std::function<Outputs(Backend&)>;

std::vector<Backend*> executors_under_test() {
  std::vector<Backend*> out{&ops::backend(Device::CPU)};
  if (cuda_device_count() > 0) out.push_back(&ops::backend(Device::CUDA));
  // The WebGPU executor's commands, run by the loopback on the CPU executor: checks every op's encoding.
  test::webgpu_loopback();
  out.push_back(&ops::backend(Device::WebGPU));
  return out;
}

void expect_matches(const Outputs& got, const Outputs& want, const std::string& who) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    const Output &g = got[k], &w = want[k];
    ASSERT_EQ(g.values.size(), w.values.size()) << who << " " << w.name;
    double scale = 1;
    if (w.mode == Tol::Norm)
      for (float v : w.values)
        if (std::isfinite(v)) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < w.values.size(); ++i) {
      const float a = g.values[i], b = w.values[i];
      if (std::isinf(b) && a == b) continue;  // lse of a row whose keys are all masked
      const double bound = w.mode == Tol::Exact     ? 0.0
                           : w.mode == Tol::Element ? w.tol * std::max(1.0, static_cast<double>(std::abs(b)))
                                                    : w.tol * scale;
      ASSERT_TRUE(std::abs(static_cast<double>(a) - b) <= bound)  // false for NaN: an element never written
          << who << ": " << w.name << "[" << i << "] = " << a << ", reference " << b << " (bound " << bound << ")";
    }
  }
}

// Runs the case on the reference, then on every executor (the CPU under each instruction set).
void check_case(const std::string& name, const Case& c) {
  SCOPED_TRACE(name);
  const Outputs want = c(ops::reference_backend());
  for (Backend* be : executors_under_test()) {
    if (be->device() == Device::CPU)
      test::for_each_isa([&](const std::string& isa) { expect_matches(c(*be), want, be->name() + " " + isa); });
    else
      expect_matches(c(*be), want, be->name());
  }
}

constexpr int kSizes[] = {1, 3, 17, 64, 67, 257};

// ---- data movement ----

TEST(BackendOps, CopiesFillAndAdd) {
  for (int rows : {1, 3, 17})
    for (int cols : {1, 5, 67})
      check_case("copy_rows " + std::to_string(rows) + "x" + std::to_string(cols), [&](Backend& be) {
        Dev d(be);
        const Span src = d.up(test::randn(static_cast<size_t>(rows) * (cols + 3), 1));
        const Span dst = d.poisoned(static_cast<size_t>(rows) * (cols + 2));
        be.copy_rows(dst.data(), cols + 2, src.data(), cols + 3, rows, cols);
        be.fill(dst.subspan(cols, 2), 7.f);  // the gap after row 0
        const Span a = d.up(test::randn(static_cast<size_t>(rows) * cols, 2)), b = d.up(test::randn(a.size(), 3));
        be.add(a, a, b);  // out aliases a, as the residual backward's dx does
        const Span bytes = d.poisoned(a.size());
        be.copy(bytes.data(), a.data(), a.size_bytes());
        std::vector<float> rows_out = d.down(dst);
        for (int r = 1; r < rows; ++r)  // the padding of later rows is never written: drop it
          rows_out[static_cast<size_t>(r) * (cols + 2) + cols] =
              rows_out[static_cast<size_t>(r) * (cols + 2) + cols + 1] = 0;
        return Outputs{{"copy_rows", rows_out, Tol::Exact, 0},
                       {"add", d.down(a), Tol::Exact, 0},
                       {"copy", d.down(bytes), Tol::Exact, 0}};
      });
}

// ---- matrix product ----

TEST(BackendOps, Gemm) {
  uint64_t seed = 10;
  for (int M : {1, 17, 67})
    for (int N : {1, 3, 64, 257})
      for (int K : {1, 17, 257})
        for (int t = 0; t < 4; ++t)
          for (float beta : {0.f, 0.5f}) {
            const bool ta = t & 1, tb = t & 2;
            const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
            const auto A = test::randn(static_cast<size_t>(ta ? K : M) * lda, seed++);
            const auto B = test::randn(static_cast<size_t>(tb ? N : K) * ldb, seed++);
            auto C0 = test::randn(static_cast<size_t>(M) * ldc, seed++);
            check_case("gemm " + std::to_string(M) + " " + std::to_string(N) + " " + std::to_string(K) + " t" +
                           std::to_string(t) + " beta " + std::to_string(beta),
                       [&](Backend& be) {
                         Dev d(be);
                         // beta == 0 must not read C: NaN there must not reach the result.
                         const Span c = beta == 0.f ? d.poisoned(C0.size()) : d.up(C0);
                         be.gemm(ta, tb, M, N, K, 0.7f, d.up(A).data(), lda, d.up(B).data(), ldb, beta, c.data(), ldc);
                         std::vector<float> out = d.down(c);
                         for (int i = 0; i < M; ++i)  // the columns past N are not C's
                           for (int j = N; j < ldc; ++j) out[static_cast<size_t>(i) * ldc + j] = 0;
                         return Outputs{{"C", out, Tol::Norm, 1e-5}};
                       });
          }
}

// ---- LayerNorm ----

TEST(BackendOps, LayerNormForwardResidualAndBackward) {
  uint64_t seed = 100;
  for (int rows : {1, 3, 17, 67})
    for (int C : kSizes) {
      const size_t n = static_cast<size_t>(rows) * C;
      auto x = test::randn(n, seed++);
      for (float& v : x) v += 3.f;  // a mean far from 0
      const auto f = test::randn(n, seed++), w = test::randn(C, seed++), b = test::randn(C, seed++);
      const auto dy = test::randn(n, seed++), dr = test::randn(n, seed++), g0 = test::randn(C, seed++);
      check_case("layernorm " + std::to_string(rows) + "x" + std::to_string(C), [&](Backend& be) {
        Dev d(be);
        const Span r = d.poisoned(n), y = d.poisoned(n), mean = d.poisoned(rows), rstd = d.poisoned(rows);
        const Span y2 = d.poisoned(n), mean2 = d.poisoned(rows), rstd2 = d.poisoned(rows);
        const Span W = d.up(w), Bb = d.up(b);
        be.residual_layernorm_forward(r, y, mean, rstd, d.up(x), d.up(f), W, Bb, rows, C);
        be.layernorm_forward(y2, mean2, rstd2, d.up(x), W, Bb, rows, C);
        const Span dx = d.up(dr), dw = d.up(g0), db = d.up(g0), dx2 = d.poisoned(n);
        const Span scratch = d.scratch(be.layernorm_backward_scratch_size(rows, C));
        be.layernorm_backward(dx, dw, db, dx, d.up(dy), r, W, mean, rstd, rows, C, scratch);  // dr aliases dx
        be.layernorm_backward(dx2, dw, db, {}, d.up(dy), r, W, mean, rstd, rows, C, scratch);
        return Outputs{{"r", d.down(r), Tol::Element, 1e-6},
                       {"y", d.down(y), Tol::Element, 1e-5},
                       {"rstd", d.down(rstd), Tol::Element, 1e-5},
                       {"y2", d.down(y2), Tol::Element, 1e-5},
                       {"dx (dr aliased)", d.down(dx), Tol::Norm, 1e-5},
                       {"dx", d.down(dx2), Tol::Norm, 1e-5},
                       {"dw", d.down(dw), Tol::Norm, 1e-5},
                       {"db", d.down(db), Tol::Norm, 1e-5}};
      });
    }
}

// ---- bias + activation, dropout ----

TEST(BackendOps, BiasActivationForwardAndBackward) {
  uint64_t seed = 200;
  for (ops::Act act : {ops::Act::Identity, ops::Act::ReLU, ops::Act::GELU})
    for (int rows : {1, 17, 67})
      for (int N : kSizes) {
        const size_t n = static_cast<size_t>(rows) * N;
        const auto h0 = test::randn(n, seed++, 2.f), b = test::randn(N, seed++), da = test::randn(n, seed++);
        const auto db0 = test::randn(N, seed++);
        check_case(
            "bias_act " + std::to_string(static_cast<int>(act)) + " " + std::to_string(rows) + "x" + std::to_string(N),
            [&](Backend& be) {
              Dev d(be);
              const Span h = d.up(h0), a = act == ops::Act::Identity ? h : d.poisoned(n);
              be.bias_act_forward(a, h, d.up(b), act, rows, N);
              const Span dh = d.up(da), db = d.up(db0), db_only = d.up(db0);
              const Span scratch = d.scratch(be.bias_act_backward_scratch_size(rows, N));
              be.bias_act_backward(dh, db, dh, h, act, rows, N, scratch);  // dh aliases da
              be.bias_act_backward({}, db_only, d.up(da), {}, ops::Act::Identity, rows, N, scratch);
              return Outputs{{"h", d.down(h), Tol::Element, 1e-6},
                             {"a", d.down(a), Tol::Element, 1e-5},
                             {"dh", d.down(dh), Tol::Element, 1e-5},
                             {"db", d.down(db), Tol::Norm, 1e-5},
                             {"db (Linear's)", d.down(db_only), Tol::Norm, 1e-5}};
            });
      }
}

TEST(BackendOps, DropoutMasksAreTheSameEverywhere) {
  for (float p : {0.f, 0.1f, 0.5f})
    for (int n : kSizes)
      check_case("dropout p " + std::to_string(p) + " n " + std::to_string(n), [&](Backend& be) {
        Dev d(be);
        const Span x = d.up(test::randn(n, 300 + n)), y = d.poisoned(n);
        be.dropout_forward(y, x, p, 42);
        be.dropout_backward(x, x, p, 43);  // in place, as the layers run it
        return Outputs{{"y", d.down(y), Tol::Exact, 0}, {"dx", d.down(x), Tol::Exact, 0}};
      });
}

// ---- attention ----

struct AttentionCase {
  int B, Tq, Tk, C, H;
  bool causal, pad;
  float dropout;
  int q_pos = 0, k_rows = 0;
  bool all_masked_row = false;  // batch 0's keys all padding
};

TEST(BackendOps, AttentionForwardBackwardAndWeights) {
  const AttentionCase cases[] = {
      {2, 9, 9, 12, 3, true, true, 0.f},
      {3, 5, 17, 8, 2, false, true, 0.1f},
      {1, 66, 66, 16, 4, true, false, 0.1f},
      {2, 3, 3, 4, 1, false, true, 0.f, 0, 0, true},  // every key of batch 0 masked: weights, output, gradient 0
      {2, 3, 7, 8, 2, true, true, 0.f, 4, 11},        // a KV cache: queries at 4.., 11 rows kept, 7 in use
  };
  uint64_t seed = 400;
  for (const AttentionCase& c : cases) {
    const int rows = c.k_rows ? c.k_rows : c.Tk;
    const size_t nq = static_cast<size_t>(c.B) * c.Tq * c.C, nkv = static_cast<size_t>(c.B) * rows * 2 * c.C;
    const auto q = test::randn(nq, seed++), kv = test::randn(nkv, seed++), dout = test::randn(nq, seed++);
    std::vector<uint8_t> pad(static_cast<size_t>(c.B) * rows, 0);
    for (int b = 0; b < c.B; ++b)
      for (int s = 0; s < rows; ++s)
        pad[static_cast<size_t>(b) * rows + s] = c.pad && (c.all_masked_row ? b == 0 : (s + b) % 4 == 3);
    check_case("attention B " + std::to_string(c.B) + " Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk),
               [&](Backend& be) {
                 Dev d(be);
                 ops::AttentionShape s{c.B,      c.Tq,      c.Tk,    c.C,
                                       c.H,      c.C,       2 * c.C, c.pad ? d.bytes(pad) : nullptr,
                                       c.causal, c.dropout, 1234};
                 s.q_pos = c.q_pos;
                 s.k_rows = c.k_rows;
                 const Span Q = d.up(q), KV = d.up(kv), out = d.poisoned(nq);
                 const Span lse = d.poisoned(static_cast<size_t>(c.B) * c.H * c.Tq);
                 const Span scratch = d.scratch(be.attention_scratch_size(s, 2));
                 be.attention_forward(out, lse, Q.data(), KV.data(), KV.data() + c.C, s, scratch);
                 const Span att = d.poisoned(static_cast<size_t>(c.B) * c.H * c.Tq * c.Tk);
                 be.attention_weights(att, Q.data(), KV.data(), s);
                 Outputs o{{"out", d.down(out), Tol::Norm, 1e-5},
                           {"lse", d.down(lse), Tol::Element, 1e-5},
                           {"weights", d.down(att), Tol::Element, 1e-5}};
                 if (c.k_rows == 0) {  // the backward never runs on a cache
                   const Span dq = d.poisoned(nq), dkv = d.poisoned(nkv);
                   be.attention_backward(dq.data(), dkv.data(), dkv.data() + c.C, d.up(dout), Q.data(), KV.data(),
                                         KV.data() + c.C, out, lse, s, scratch);
                   o.push_back({"dq", d.down(dq), Tol::Norm, 1e-5});
                   o.push_back({"dkv", d.down(dkv), Tol::Norm, 1e-5});
                 }
                 return o;
               });
  }
}

// ---- embedding, pooling ----

TEST(BackendOps, EmbeddingForwardBackward) {
  uint64_t seed = 500;
  for (int V : {1, 3, 65})
    for (int T : {1, 17})
      for (int C : {1, 17, 64}) {
        const int B = 3;
        std::vector<int32_t> tok(static_cast<size_t>(B) * T);
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 7 + seed) % V);
        const auto wte = test::randn(static_cast<size_t>(V) * C, seed++),
                   pos = test::randn(static_cast<size_t>(T) * C, seed++);
        const auto dx = test::randn(static_cast<size_t>(B) * T * C, seed++), g0 = test::randn(wte.size(), seed++);
        check_case("embedding V " + std::to_string(V) + " T " + std::to_string(T) + " C " + std::to_string(C),
                   [&](Backend& be) {
                     Dev d(be);
                     const ops::Ids ids = d.ids(tok);
                     const Span x = d.poisoned(dx.size()), dwte = d.up(g0), dpos = d.up(pos);
                     be.embedding_forward(x, ids, d.up(wte), d.up(pos), 1.7f, B, T, C);
                     be.embedding_backward(dwte, dpos, d.up(dx), ids, 1.7f, B, T, C,
                                           d.scratch(be.embedding_backward_scratch_size(V, B * T)));
                     return Outputs{{"x", d.down(x), Tol::Exact, 0},
                                    {"dwte", d.down(dwte), Tol::Norm, 1e-6},
                                    {"dpos", d.down(dpos), Tol::Norm, 1e-6}};
                   });
      }
}

TEST(BackendOps, MeanPoolingOverNonPadPositions) {
  for (int T : {1, 3, 17})
    for (int C : {1, 17, 64}) {
      const int B = 4;
      std::vector<uint8_t> pad(static_cast<size_t>(B) * T);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) pad[static_cast<size_t>(b) * T + t] = b == 3 || (t + b) % 3 == 2;  // row 3: all pad
      const auto x = test::randn(static_cast<size_t>(B) * T * C, 600 + T),
                 dout = test::randn(static_cast<size_t>(B) * C, 601);
      check_case("mean_pool T " + std::to_string(T) + " C " + std::to_string(C), [&](Backend& be) {
        Dev d(be);
        const uint8_t* kp = d.bytes(pad);
        const Span out = d.poisoned(dout.size()), dx = d.poisoned(x.size());
        be.mean_pool_forward(out, d.up(x), kp, B, T, C);
        be.mean_pool_backward(dx, d.up(dout), kp, B, T, C);
        return Outputs{{"out", d.down(out), Tol::Element, 1e-6}, {"dx", d.down(dx), Tol::Element, 1e-6}};
      });
    }
}

// ---- loss ----

TEST(BackendOps, CrossEntropyAndArgmax) {
  uint64_t seed = 700;
  for (float smoothing : {0.f, 0.1f})
    for (int rows : {1, 3, 17, 67})
      for (int V : kSizes) {
        auto logits = test::randn(static_cast<size_t>(rows) * V, seed++, 3.f);
        logits[0] += 1e4f;  // a huge logit: no overflow
        std::vector<int32_t> targets(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) targets[static_cast<size_t>(r)] = r % 5 == 4 ? -100 : (r * 13 + V) % V;
        check_case(
            "crossentropy rows " + std::to_string(rows) + " V " + std::to_string(V) + " e " + std::to_string(smoothing),
            [&](Backend& be) {
              Dev d(be);
              const ops::Ids t = d.ids(targets);
              const Span z = d.up(logits), losses = d.poisoned(rows), losses2 = d.poisoned(rows);
              be.crossentropy_forward(losses, z, t, rows, V, -100, smoothing);
              const std::span<int32_t> best = d.ints(std::vector<int32_t>(static_cast<size_t>(rows), -1));
              be.argmax_rows(best, z, rows, V);
              std::vector<int32_t> hb(static_cast<size_t>(rows));
              be.download(hb.data(), best.data(), hb.size() * sizeof(int32_t));
              be.crossentropy_forward_backward(losses2, z, z, t, 0.25f, rows, V, -100, smoothing);  // aliased
              return Outputs{{"losses", d.down(losses), Tol::Element, 1e-5},
                             {"argmax", std::vector<float>(hb.begin(), hb.end()), Tol::Exact, 0},
                             {"losses (with the gradient)", d.down(losses2), Tol::Element, 1e-5},
                             {"dlogits", d.down(z), Tol::Element, 1e-5}};
            });
      }
}

// ---- optimizer ----

TEST(BackendOps, AdamStepOverRangesWithGapsAndTheSumOfSquares) {
  const size_t n = 1000;
  const std::vector<ops::AdamRange> ranges = {{0, 100, 0.1f}, {128, 500, 0.f}, {512, 1000, 0.1f}};  // gaps left alone
  for (bool decoupled : {true, false})
    for (int t : {1, 7}) {
      const ops::AdamHyper h{1e-2f, 0.9f, 0.98f, 1e-8f, decoupled, t, 0.5f};
      check_case(std::string("adam ") + (decoupled ? "AdamW" : "Adam") + " t " + std::to_string(t), [&](Backend& be) {
        Dev d(be);
        const Span p = d.up(test::randn(n, 800)), m = d.up(test::randn(n, 801, 0.1f));
        auto v0 = test::randn(n, 802, 0.1f);
        for (float& x : v0) x = x * x;
        const Span v = d.up(v0), g = d.up(test::randn(n, 803));
        be.adam_step(p, m, v, g, ranges, h, d.scratch(be.adam_scratch_size(ranges.size())));
        const double ss = be.sum_squares(g, d.scratch(be.sum_squares_scratch_size()));
        return Outputs{{"p", d.down(p), Tol::Element, 1e-6},
                       {"m", d.down(m), Tol::Element, 1e-6},
                       {"v", d.down(v), Tol::Element, 1e-6},
                       {"sum_squares", {static_cast<float>(ss)}, Tol::Element, 1e-6}};
      });
    }
}

TEST(BackendOps, CudaIsCheckedWhereAGpuIsPresent) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << cuda_unavailable_reason() << ": the cases above ran the CPU executor only";
  EXPECT_EQ(executors_under_test().size(), 3u);
}

}  // namespace
}  // namespace qkv
