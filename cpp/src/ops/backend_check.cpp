// Every op of the contract on one executor against another (ops/backend_check.h). The cases were the body of
// tests/cpp/ops/backend_ops_test.cpp (ggml's test-backend-ops); they live here so that the same sweep also runs
// where no test framework does: in the browser, WebGPU against the wasm core (checkBackend() in the package).
// Outputs start poisoned with NaN, so an element an executor fails to write fails. Tolerances: exact for data
// movement, dropout, argmax and the embedding (the same float operations in the same order); otherwise
// |got - want| <= tol * max(1, |want|) element by element, or, for outputs that are sums whose terms can cancel
// (gemm, parameter gradients, LayerNorm's dx), tol * max(1, max |want|) over the output: their rounding is
// relative to the terms, which cancellation can make far larger than the result.
#include "ops/backend_check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/weight_quantize.h"
#include "qkv/error.h"
#include "runtime/random.h"

namespace qkv::ops {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal()) * scale;
  return v;
}

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

// Runs each case on the oracle and on the executor under check, and records how far each output is.
class Runner {
 public:
  Runner(Backend& be, Backend& oracle, std::vector<OpCheck>& out) : be_(be), oracle_(oracle), out_(out) {}
  void operator()(const std::string& name, const Case& c) {
    const Outputs want = c(oracle_), got = c(be_);
    for (size_t k = 0; k < want.size(); ++k) out_.push_back(compare(name + ": " + want[k].name, got[k], want[k]));
  }

 private:
  static OpCheck compare(const std::string& name, const Output& g, const Output& w) {
    OpCheck r{name, 0.0, w.tol, true, ""};
    if (g.values.size() != w.values.size()) {
      r.ok = false;
      r.detail = std::to_string(g.values.size()) + " values, expected " + std::to_string(w.values.size());
      return r;
    }
    double scale = 1;
    if (w.mode == Tol::Norm)
      for (float v : w.values)
        if (std::isfinite(v)) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < w.values.size(); ++i) {
      const float a = g.values[i], b = w.values[i];
      if (std::isinf(b) && a == b) continue;  // lse of a row whose keys are all masked
      const double s = w.mode == Tol::Element ? std::max(1.0, static_cast<double>(std::abs(b))) : scale;
      const double e = std::abs(static_cast<double>(a) - b) / s;
      const bool bad = !(e <= w.tol);  // NaN (an element never written) is bad
      if (bad && r.ok)
        r.detail = detail::cat("[", i, "] = ", std::to_string(a), ", reference ", std::to_string(b), " (bound ",
                               w.tol * s, ")");
      r.ok = r.ok && !bad;
      r.error = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(r.error, e);
    }
    return r;
  }

  Backend& be_;
  Backend& oracle_;
  std::vector<OpCheck>& out_;
};

constexpr int kSizes[] = {1, 3, 17, 64, 67, 257};

// ---- data movement ----

void check_copies(Runner& check_case) {
  for (int rows : {1, 3, 17})
    for (int cols : {1, 5, 67})
      check_case("copy_rows " + std::to_string(rows) + "x" + std::to_string(cols), [&](Backend& be) {
        Dev d(be);
        const Span src = d.up(randn(static_cast<size_t>(rows) * (cols + 3), 1));
        const Span dst = d.poisoned(static_cast<size_t>(rows) * (cols + 2));
        be.copy_rows(dst.data(), cols + 2, src.data(), cols + 3, rows, cols);
        be.fill(dst.subspan(cols, 2), 7.f);  // the gap after row 0
        const Span a = d.up(randn(static_cast<size_t>(rows) * cols, 2)), b = d.up(randn(a.size(), 3));
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

void check_gemm(Runner& check_case) {
  uint64_t seed = 10;
  for (int M : {1, 17, 67})
    for (int N : {1, 3, 64, 257})
      for (int K : {1, 17, 257})
        for (int t = 0; t < 4; ++t)
          for (float beta : {0.f, 0.5f}) {
            const bool ta = t & 1, tb = t & 2;
            const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
            const auto A = randn(static_cast<size_t>(ta ? K : M) * lda, seed++);
            const auto B = randn(static_cast<size_t>(tb ? N : K) * ldb, seed++);
            auto C0 = randn(static_cast<size_t>(M) * ldc, seed++);
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

// A Linear layer's forward (linear_forward): the product and its bias, then the activation, in both of the layer's
// forms (a separate activation output, and in place with Identity); a CUDA backend adds the bias (and a ReLU) in
// cuBLASLt's epilogue, the others run gemm and bias_act. Under ReLU h is scratch (ops.h): only a is compared.
void check_linear(Runner& check_case) {
  uint64_t seed = 50;
  for (int rows : {1, 17, 67})
    for (int in : {1, 17, 64})
      for (int out : {3, 64, 257})
        for (Act act : {Act::Identity, Act::ReLU, Act::GELU, Act::GELUTanh}) {
          const auto x = randn(static_cast<size_t>(rows) * in, seed++),
                     w = randn(static_cast<size_t>(out) * in, seed++);
          const auto b = randn(out, seed++);
          check_case("linear " + std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out) +
                         (act == Act::GELU       ? " gelu"
                          : act == Act::GELUTanh ? " gelu_tanh"
                          : act == Act::ReLU     ? " relu"
                                                 : ""),
                     [&](Backend& be) {
                       Dev d(be);
                       const size_t n = static_cast<size_t>(rows) * out;
                       const Span h = d.poisoned(n), a = act == Act::Identity ? h : d.poisoned(n);
                       be.linear_forward(a, h, d.up(x), d.up(w), d.up(b), act, rows, in, out);
                       const Span nb = d.poisoned(n);  // no bias: the product alone
                       be.linear_forward(nb, nb, d.up(x), d.up(w), {}, Act::Identity, rows, in, out);
                       Outputs o{{"a", d.down(a), Tol::Norm, 1e-5}, {"no bias", d.down(nb), Tol::Norm, 1e-5}};
                       if (act != Act::ReLU) o.push_back({"h", d.down(h), Tol::Norm, 1e-5});
                       return o;
                     });
        }
}

// ---- LayerNorm ----

void check_layernorm(Runner& check_case) {
  uint64_t seed = 100;
  for (int rows : {1, 3, 17, 67})
    for (int C : kSizes) {
      const size_t n = static_cast<size_t>(rows) * C;
      auto x = randn(n, seed++);
      for (float& v : x) v += 3.f;  // a mean far from 0
      const auto f = randn(n, seed++), w = randn(C, seed++), b = randn(C, seed++);
      const auto dy = randn(n, seed++), dr = randn(n, seed++), g0 = randn(C, seed++);
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

void check_bias_act(Runner& check_case) {
  uint64_t seed = 200;
  for (Act act : {Act::Identity, Act::ReLU, Act::GELU, Act::GELUTanh})
    for (int rows : {1, 17, 67})
      for (int N : kSizes) {
        const size_t n = static_cast<size_t>(rows) * N;
        const auto h0 = randn(n, seed++, 2.f), b = randn(N, seed++), da = randn(n, seed++);
        const auto db0 = randn(N, seed++);
        check_case(
            "bias_act " + std::to_string(static_cast<int>(act)) + " " + std::to_string(rows) + "x" + std::to_string(N),
            [&](Backend& be) {
              Dev d(be);
              const Span h = d.up(h0), a = act == Act::Identity ? h : d.poisoned(n);
              be.bias_act_forward(a, h, d.up(b), act, rows, N);
              const Span dh = d.up(da), db = d.up(db0), db_only = d.up(db0);
              const Span scratch = d.scratch(be.bias_act_backward_scratch_size(rows, N));
              be.bias_act_backward(dh, db, dh, h, act, rows, N, scratch);  // dh aliases da
              be.bias_act_backward({}, db_only, d.up(da), {}, Act::Identity, rows, N, scratch);
              return Outputs{{"h", d.down(h), Tol::Element, 1e-6},
                             {"a", d.down(a), Tol::Element, 1e-5},
                             {"dh", d.down(dh), Tol::Element, 1e-5},
                             {"db", d.down(db), Tol::Norm, 1e-5},
                             {"db (Linear's)", d.down(db_only), Tol::Norm, 1e-5}};
            });
      }
}

void check_dropout(Runner& check_case) {
  for (float p : {0.f, 0.1f, 0.5f})
    for (int n : kSizes)
      check_case("dropout p " + std::to_string(p) + " n " + std::to_string(n), [&](Backend& be) {
        Dev d(be);
        const Span x = d.up(randn(n, 300 + n)), y = d.poisoned(n);
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

void check_attention(Runner& check_case) {
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
    const auto q = randn(nq, seed++), kv = randn(nkv, seed++), dout = randn(nq, seed++);
    std::vector<uint8_t> pad(static_cast<size_t>(c.B) * rows, 0);
    for (int b = 0; b < c.B; ++b)
      for (int s = 0; s < rows; ++s)
        pad[static_cast<size_t>(b) * rows + s] = c.pad && (c.all_masked_row ? b == 0 : (s + b) % 4 == 3);
    check_case("attention B " + std::to_string(c.B) + " Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk),
               [&](Backend& be) {
                 Dev d(be);
                 AttentionShape s{c.B,      c.Tq,      c.Tk, c.C, c.H, c.C, 2 * c.C, c.pad ? d.bytes(pad) : nullptr,
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

void check_embedding(Runner& check_case) {
  uint64_t seed = 500;
  for (int V : {1, 3, 65})
    for (int T : {1, 17, 400})  // 400: 1200 rows, more than one block of the WebGPU backward's row lists
      for (int C : {1, 17, 64}) {
        const int B = 3;
        std::vector<int32_t> tok(static_cast<size_t>(B) * T);
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 7 + seed) % V);
        const auto wte = randn(static_cast<size_t>(V) * C, seed++), pos = randn(static_cast<size_t>(T) * C, seed++);
        const auto dx = randn(static_cast<size_t>(B) * T * C, seed++), g0 = randn(wte.size(), seed++);
        check_case("embedding V " + std::to_string(V) + " T " + std::to_string(T) + " C " + std::to_string(C),
                   [&](Backend& be) {
                     Dev d(be);
                     const Ids ids = d.ids(tok);
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

void check_mean_pool(Runner& check_case) {
  for (int T : {1, 3, 17})
    for (int C : {1, 17, 64}) {
      const int B = 4;
      std::vector<uint8_t> pad(static_cast<size_t>(B) * T);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) pad[static_cast<size_t>(b) * T + t] = b == 3 || (t + b) % 3 == 2;  // row 3: all pad
      const auto x = randn(static_cast<size_t>(B) * T * C, 600 + T), dout = randn(static_cast<size_t>(B) * C, 601);
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

void check_crossentropy(Runner& check_case) {
  uint64_t seed = 700;
  for (float smoothing : {0.f, 0.1f})
    for (int rows : {1, 3, 17, 67})
      for (int V : kSizes) {
        auto logits = randn(static_cast<size_t>(rows) * V, seed++, 3.f);
        logits[0] += 1e4f;  // a huge logit: no overflow
        std::vector<int32_t> targets(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) targets[static_cast<size_t>(r)] = r % 5 == 4 ? -100 : (r * 13 + V) % V;
        check_case(
            "crossentropy rows " + std::to_string(rows) + " V " + std::to_string(V) + " e " + std::to_string(smoothing),
            [&](Backend& be) {
              Dev d(be);
              const Ids t = d.ids(targets);
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

void check_adam(Runner& check_case) {
  const size_t n = 1000;
  const std::vector<AdamRange> ranges = {{0, 100, 0.1f}, {128, 500, 0.f}, {512, 1000, 0.1f}};  // gaps left alone
  for (bool decoupled : {true, false})
    for (int t : {1, 7}) {
      const AdamHyper h{1e-2f, 0.9f, 0.98f, 1e-8f, decoupled, t, 0.5f};
      check_case(std::string("adam ") + (decoupled ? "AdamW" : "Adam") + " t " + std::to_string(t), [&](Backend& be) {
        Dev d(be);
        const Span p = d.up(randn(n, 800)), m = d.up(randn(n, 801, 0.1f));
        auto v0 = randn(n, 802, 0.1f);
        for (float& x : v0) x = x * x;
        const Span v = d.up(v0), g = d.up(randn(n, 803));
        be.adam_step(p, m, v, g, ranges, h, d.scratch(be.adam_scratch_size(ranges.size())));
        const double ss = be.sum_squares(g, d.scratch(be.sum_squares_scratch_size()));
        return Outputs{{"p", d.down(p), Tol::Element, 1e-6},
                       {"m", d.down(m), Tol::Element, 1e-6},
                       {"v", d.down(v), Tol::Element, 1e-6},
                       {"sum_squares", {static_cast<float>(ss)}, Tol::Element, 1e-6}};
      });
    }
}

// ---- quantized weights ----

// W (rows, K) quantized on the host (ops/weight_quantize.h), with the hard rows: row 0 all zero (Int8's scale 0),
// row 1's first group of 32 all zero (a Q4 scale 0), and a large value that sets a row's scale.
struct Packed {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};
Packed packed_weights(WeightFormat f, int rows, int K, uint64_t seed) {
  std::vector<float> w = randn(static_cast<size_t>(rows) * K, seed, 0.5f);
  for (int k = 0; k < K; ++k) w[static_cast<size_t>(k)] = 0.f;
  if (rows > 1)
    for (int k = 0; k < std::min(K, group_size); ++k) w[static_cast<size_t>(K) + k] = 0.f;
  if (rows > 2) w[static_cast<size_t>(2) * K + K / 2] = 9.f;
  Packed p{std::vector<uint8_t>(packed_bytes(f, rows, K)),
           std::vector<float>(static_cast<size_t>(rows) * scales_per_row(f, K))};
  quantize_rows(f, w.data(), rows, K, p.bytes.data(), p.scales.empty() ? nullptr : p.scales.data());
  return p;
}

void check_quant(Runner& check_case) {
  uint64_t seed = 900;
  for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4}) {
    const std::string fn = format_name(f);
    for (int K : {1, 31, 33, 100, 768}) {
      // The product reads rows [1, N] of a packed N + 1 rows (a caller's row offset: in_proj's k and v).
      // int8_act: the permission to quantize A to int8 (int8 and q4 weights) moves the product by A's rounding to 8
      // bits (about 0.5% of a typical product's size for these Gaussian rows; kernels/cpu/gemm_quant_dot.h), so those
      // cases are held to 2% of the largest |C| of 67 columns (one column's C may be near 0: a relative error of it
      // means nothing). An executor that does not take the permission matches the reference exactly.
      const bool quantized = f == WeightFormat::Int8 || f == WeightFormat::Q4;
      for (bool int8_act : {false, true})
        for (int M : {1, 3, 17})
          for (int N : {1, 5, 67}) {
            if (int8_act && (!quantized || N != 67)) continue;  // 67 columns: max |C| is a typical size
            const Packed w = packed_weights(f, N + 1, K, seed++);
            const int lda = K + 3, ldc = N + 2;
            const auto A = randn(static_cast<size_t>(M) * lda, seed++);
            check_case("gemm_quant " + fn + (int8_act ? " int8_act " : " ") + std::to_string(M) + " " +
                           std::to_string(N) + " " + std::to_string(K),
                       [&](Backend& be) {
                         Dev d(be);
                         const Span c = d.poisoned(static_cast<size_t>(M) * ldc);
                         const int spr = scales_per_row(f, K);
                         const float* sc = spr ? d.up(w.scales).data() + spr : nullptr;
                         be.gemm_quant(M, N, K, d.up(A).data(), lda, static_cast<int>(f),
                                       d.bytes(w.bytes) + row_stride(f, K), sc, c.data(), ldc, int8_act);
                         std::vector<float> out = d.down(c);
                         for (int i = 0; i < M; ++i)  // the columns past N are not C's
                           for (int j = N; j < ldc; ++j) out[static_cast<size_t>(i) * ldc + j] = 0;
                         return Outputs{{"C", out, Tol::Norm, int8_act ? 2e-2 : 1e-5}};
                       });
          }
      // linear_quant_forward: the product, its bias and activation (the CPU executor applies them as its threads
      // finish pieces of h, the others run gemm_quant then bias_act_forward); int8_act as gemm_quant's cases above.
      if (K == 33 || K == 100)
        for (bool int8_act : {false, true})
          for (int rows : {1, 3, 17})
            for (Act act : {Act::Identity, Act::ReLU, Act::GELU, Act::GELUTanh}) {
              if (int8_act && !quantized) continue;
              const int out = 67;
              const Packed w = packed_weights(f, out, K, seed++);
              const auto x = randn(static_cast<size_t>(rows) * K, seed++), b = randn(out, seed++);
              check_case("linear_quant_forward " + fn + (int8_act ? " int8_act " : " ") + std::to_string(rows) + "x" +
                             std::to_string(K) + "->" + std::to_string(out) + " act " +
                             std::to_string(static_cast<int>(act)),
                         [&](Backend& be) {
                           Dev d(be);
                           const size_t n = static_cast<size_t>(rows) * out;
                           const Span h = d.poisoned(n), a = act == Act::Identity ? h : d.poisoned(n);
                           const float* sc = w.scales.empty() ? nullptr : d.up(w.scales).data();
                           be.linear_quant_forward(a, h, d.up(x).data(), static_cast<int>(f), d.bytes(w.bytes), sc,
                                                   d.up(b), act, rows, K, out, int8_act);
                           const double tol = int8_act ? 2e-2 : 1e-5;
                           Outputs o{{"a", d.down(a), Tol::Norm, tol}};
                           if (act != Act::ReLU) o.push_back({"h", d.down(h), Tol::Norm, tol});
                           return o;
                         });
            }
      // dequantize_rows: every element exactly, into rows of ld_out = K + 1 (the gap is never written).
      for (int rows : {1, 5}) {
        const Packed w = packed_weights(f, rows, K, seed++);
        check_case("dequantize_rows " + fn + " " + std::to_string(rows) + "x" + std::to_string(K), [&](Backend& be) {
          Dev d(be);
          const Span out = d.poisoned(static_cast<size_t>(rows) * (K + 1));
          be.dequantize_rows(out.data(), K + 1, static_cast<int>(f), d.bytes(w.bytes),
                             w.scales.empty() ? nullptr : d.up(w.scales).data(), rows, K);
          std::vector<float> o = d.down(out);
          for (int r = 0; r < rows; ++r) o[static_cast<size_t>(r) * (K + 1) + K] = 0;
          return Outputs{{"out", o, Tol::Exact, 0}};
        });
      }
    }
    // The embedding from a packed table: V = 7 rows, each token present; with and without positions.
    for (int C : {1, 31, 33, 100}) {
      const int V = 7, B = 2, T = 5;
      const Packed wte = packed_weights(f, V, C, seed++);
      const auto pos = randn(static_cast<size_t>(T + 2) * C, seed++);  // more rows than T: rows [0, T) used
      std::vector<int32_t> tok(static_cast<size_t>(B) * T);
      for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 3 + 1) % V);
      check_case("embedding_forward_quant " + fn + " C " + std::to_string(C), [&](Backend& be) {
        Dev d(be);
        const Ids ids = d.ids(tok);
        const Span x = d.poisoned(static_cast<size_t>(B) * T * C), x0 = d.poisoned(x.size());
        const uint8_t* table = d.bytes(wte.bytes);
        const float* sc = wte.scales.empty() ? nullptr : d.up(wte.scales).data();
        be.embedding_forward_quant(x, ids, static_cast<int>(f), table, sc, d.up(pos), 1.7f, B, T, C);
        be.embedding_forward_quant(x0, ids, static_cast<int>(f), table, sc, {}, 0.5f, B, T, C);
        return Outputs{{"x", d.down(x), Tol::Exact, 0}, {"x (no positions)", d.down(x0), Tol::Exact, 0}};
      });
    }
  }
}

// The groups, and every op of ops/op_list.def in one of them: an op declared with a group that is not here fails
// to build, so that no op reaches the executors unchecked.
constexpr std::pair<std::string_view, void (*)(Runner&)> kGroups[] = {
    {"copies", check_copies},       {"gemm", check_gemm},
    {"linear", check_linear},       {"layernorm", check_layernorm},
    {"bias_act", check_bias_act},   {"dropout", check_dropout},
    {"attention", check_attention}, {"embedding", check_embedding},
    {"mean_pool", check_mean_pool}, {"crossentropy", check_crossentropy},
    {"adam", check_adam},           {"quant", check_quant}};
constexpr bool has_group(std::string_view g) {
  for (const auto& [name, fn] : kGroups)
    if (name == g) return true;
  return false;
}
#define QKV_OP(name, Code, opcode, group, scratch) \
  static_assert(has_group(#group), "op " #name ": its check group \"" #group "\" is not in kGroups");
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch) QKV_OP(name, Code, opcode, group, scratch)
#define QKV_SCRATCH(rule)
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST

}  // namespace

std::vector<OpCheck> check_backend(Backend& be, Backend& oracle, std::string_view group) {
  std::vector<OpCheck> out;
  Runner run(be, oracle, out);
  bool known = group.empty();
  std::string names;
  for (const auto& [name, fn] : kGroups) {
    names += std::string(name) + ", ";
    if (group.empty() || group == name) {
      known = true;
      fn(run);
    }
  }
  check(known, "group = \"", group, "\" is unknown: expected ", names, "or \"\" (all)");
  return out;
}

}  // namespace qkv::ops
