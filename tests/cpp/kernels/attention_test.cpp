// Attention: the reference against plain double-precision formulas; the fused kernel against the reference
// over ragged shapes (below, at and above the 32- and 64-wide tiles and the vector widths), odd head sizes, every
// mask combination, dropout, the layer's strides (ldq = C; k and v interleaved with ldkv = 2C), 1 and 2
// threads and every instruction set (forced); and the layer's weights() against the reference's att.
#include "nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::attention_test {
namespace {

// Key padding (B,Tk), a pattern per batch: the last third of the keys; every key (no query sees anything);
// every third key from key 0 (under the causal mask query 0 sees nothing).
std::vector<uint8_t> key_pad(int B, int Tk) {
  std::vector<uint8_t> pad(static_cast<size_t>(B) * Tk, 0);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < Tk; ++s) {
      const bool padded = b % 3 == 0 ? s >= Tk - Tk / 3 : b % 3 == 1 ? true : s % 3 == 0;
      pad[static_cast<size_t>(b) * Tk + s] = padded;
    }
  return pad;
}

// Self-attention (q, k, v interleaved in one (B,T,3C) buffer) and cross-attention (Tq != Tk), with the causal
// mask, key padding (including a fully padded row of keys), both, or none.
TEST(Attention, ReferenceAndFusedForwardMatchDoubleFormulaWithMasks) {
  const int B = 2, H = 3, hs = 5, C = H * hs;
  struct Case {
    int Tq, Tk;
    bool causal, pad;
  };
  const Case cases[] = {{1, 1, true, false}, {7, 7, true, false},  {17, 17, true, true},
                        {5, 9, false, true}, {6, 3, false, false}, {4, 4, false, true}};
  for (const Case& c : cases) {
    auto q = test::randn(static_cast<size_t>(B) * c.Tq * C, c.Tq);
    auto kv = test::randn(static_cast<size_t>(B) * c.Tk * 2 * C, c.Tk + 1);
    std::vector<uint8_t> pad(static_cast<size_t>(B) * c.Tk, 0);
    if (c.pad) {
      for (int s = c.Tk / 2; s < c.Tk; ++s) pad[s] = 1;  // batch 0: second half padded
      if (!c.causal)
        for (int s = 0; s < c.Tk; ++s) pad[c.Tk + s] = 1;  // batch 1: every key padded
    }
    std::vector<float> out(static_cast<size_t>(B) * c.Tq * C), att(static_cast<size_t>(B) * H * c.Tq * c.Tk);
    std::vector<float> fused(out.size()), lse(static_cast<size_t>(B) * H * c.Tq);
    std::vector<float> scratch(kernels::attention_scratch_size(c.Tq, c.Tk, hs, 1));
    const kernels::AttentionShape shape{B, c.Tq, c.Tk, C, H, C, 2 * C, c.pad ? pad.data() : nullptr, c.causal, 0.f, 0};
    kernels::attention_forward_reference(out, att, {}, q.data(), kv.data(), kv.data() + C, shape);
    kernels::attention_forward(fused, lse, scratch, q.data(), kv.data(), kv.data() + C, shape);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < c.Tq; ++t) {
          auto qa = [&](int i) { return static_cast<double>(q[(b * c.Tq + t) * C + h * hs + i]); };
          auto ka = [&](int u, int part, int i) {
            return static_cast<double>(kv[(b * c.Tk + u) * 2 * C + part * C + h * hs + i]);
          };
          auto seen = [&](int u) { return !(c.causal && u > t) && !(c.pad && pad[b * c.Tk + u]); };
          std::vector<double> s(c.Tk, 0.0);
          double mx = -1e30, sum = 0;
          for (int u = 0; u < c.Tk; ++u) {
            if (!seen(u)) continue;
            for (int i = 0; i < hs; ++i) s[u] += qa(i) * ka(u, 0, i);
            s[u] /= std::sqrt(static_cast<double>(hs));
            mx = std::max(mx, s[u]);
          }
          for (int u = 0; u < c.Tk; ++u) sum += s[u] = seen(u) ? std::exp(s[u] - mx) : 0.0;
          const std::string where = "Tq=" + std::to_string(c.Tq) + " Tk=" + std::to_string(c.Tk) +
                                    " causal=" + std::to_string(c.causal) + " pad=" + std::to_string(c.pad);
          for (int u = 0; u < c.Tk; ++u) {
            const double p = sum > 0 ? s[u] / sum : 0.0;  // all keys masked: zero weights, zero output
            ASSERT_NEAR(att[((static_cast<size_t>(b) * H + h) * c.Tq + t) * c.Tk + u], p, 1e-6) << where;
          }
          // The saved logsumexp: log sum exp(S) over the visible keys, +inf when there are none.
          const float l = lse[(static_cast<size_t>(b) * H + h) * c.Tq + t];
          if (sum > 0)
            ASSERT_NEAR(l, mx + std::log(sum), 1e-5 * (1 + std::abs(mx))) << where;
          else
            ASSERT_EQ(l, std::numeric_limits<float>::infinity()) << where;
          for (int i = 0; i < hs; ++i) {
            double o = 0;
            for (int u = 0; u < c.Tk; ++u) o += (sum > 0 ? s[u] / sum : 0.0) * ka(u, 1, i);
            const size_t at = (static_cast<size_t>(b) * c.Tq + t) * C + h * hs + i;
            ASSERT_NEAR(out[at], o, 1e-5) << where;
            ASSERT_NEAR(fused[at], o, 1e-5) << where;
          }
        }
  }
}

struct Case {
  int B, H, hs, Tq, Tk;
  bool causal, pad;
  float dropout;
  float qscale;  // 1, or large for peaked softmax rows (large logits)
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "B=" << c.B << " H=" << c.H << " hs=" << c.hs << " Tq=" << c.Tq << " Tk=" << c.Tk << " causal=" << c.causal
    << " pad=" << c.pad << " dropout=" << c.dropout << " qscale=" << c.qscale;
  return s.str();
}

// One case's inputs laid out as the layer lays them out: q (B,Tq,C); k | v interleaved in (B,Tk,2C).
struct Inputs {
  std::vector<float> q, kv, dout;
  std::vector<uint8_t> pad;
  kernels::AttentionShape shape;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  const int C = c.H * c.hs;
  Inputs in;
  in.q = test::randn(static_cast<size_t>(c.B) * c.Tq * C, seed, c.qscale);
  in.kv = test::randn(static_cast<size_t>(c.B) * c.Tk * 2 * C, seed + 1);
  in.dout = test::randn(static_cast<size_t>(c.B) * c.Tq * C, seed + 2);
  in.pad = key_pad(c.B, c.Tk);
  in.shape = {c.B, c.Tq, c.Tk, C, c.H, C, 2 * C, c.pad ? in.pad.data() : nullptr, c.causal, c.dropout, seed * 977};
  return in;
}

// The forward's output (B,Tq,C) and the gradients: dq (B,Tq,C), dk | dv interleaved like k | v (B,Tk,2C).
struct Result {
  std::vector<float> out, dq, dkv;
};

Result run_reference(const Inputs& in) {
  const auto& s = in.shape;
  const size_t tt = static_cast<size_t>(s.B) * s.H * s.Tq * s.Tk;
  std::vector<float> att(tt), att_drop(s.dropout > 0.f ? tt : 0), datt(tt);
  Result r{std::vector<float>(in.q.size()), std::vector<float>(in.q.size()), std::vector<float>(in.kv.size())};
  const float *q = in.q.data(), *k = in.kv.data(), *v = in.kv.data() + s.C;
  kernels::attention_forward_reference(r.out, att, att_drop, q, k, v, s);
  kernels::attention_backward_reference(r.dq.data(), r.dkv.data(), r.dkv.data() + s.C, datt, in.dout, q, k, v, att,
                                        att_drop, s);
  return r;
}

// Outputs and scratch start as NaN: every output element must be written, and no scratch value read
// before it is written.
Result run_fused(const Inputs& in, int tasks) {
  const auto& s = in.shape;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Result r{std::vector<float>(in.q.size(), nan), std::vector<float>(in.q.size(), nan),
           std::vector<float>(in.kv.size(), nan)};
  std::vector<float> lse(static_cast<size_t>(s.B) * s.H * s.Tq, nan);
  std::vector<float> scratch(kernels::attention_scratch_size(s.Tq, s.Tk, s.C / s.H, tasks), nan);
  const float *q = in.q.data(), *k = in.kv.data(), *v = in.kv.data() + s.C;
  kernels::attention_forward(r.out, lse, scratch, q, k, v, s);
  kernels::attention_backward(r.dq.data(), r.dkv.data(), r.dkv.data() + s.C, scratch, in.dout, q, k, v, r.out, lse, s);
  return r;
}

// max |got - want| / max(max |want|, 1). The inputs are N(0,1) (q up to 8x), so the terms that make up
// each output are O(1); where a whole tensor cancels to about 0 (dq and dk are exactly 0 when every query
// sees one key), 1 stands for the magnitude of its terms.
double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, mag = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(diff, d);
    mag = std::max(mag, std::abs(static_cast<double>(want[i])));
  }
  return diff / mag;
}

// The ragged sweep: every (Tq, Tk) pair of the sizes, each with every mask combination and dropout 0 and
// 0.1; B, H and hs cycle through their values with the case number (periods 3, 4, 5), so each value meets
// every size. One case in seven has 8x larger queries (peaked softmax rows).
std::vector<Case> sweep() {
  const int sizes[] = {1, 3, 17, 64, 67, 129}, head_sizes[] = {1, 3, 16, 32, 64};
  std::vector<Case> cases;
  for (int Tq : sizes)
    for (int Tk : sizes)
      for (int mask = 0; mask < 4; ++mask)
        for (float p : {0.f, 0.1f}) {
          const int n = static_cast<int>(cases.size());
          cases.push_back({1 + n % 3, 1 + n % 4, head_sizes[n % 5], Tq, Tk, (mask & 1) != 0, (mask & 2) != 0, p,
                           n % 7 == 3 ? 8.f : 1.f});
        }
  return cases;
}

// Tolerances (rel_err above). Both kernels evaluate the same float formulas and differ only in order and
// grouping: the fused one sums P v over key blocks with rescaling, normalises after the product instead of
// before, recomputes P as exp(S - lse) instead of exp(S - max) / sum (lse carries |S| * 2^-24, as S does),
// and takes D as rowsum(dout * out) instead of rowsum(dP * P). Each is a few float32 roundings
// (2^-24 = 6e-8) per term of a sum of at most Tk + hs = 193 terms: ~1.2e-5 in the worst case, about the
// square root of that count of roundings in practice. The forward is one such sum (kForwardTol); a
// gradient chains two through dP - D, so kBackwardTol is twice the forward's. Measured over the sweep:
// at most 1.9e-6 (out) and 4.0e-6 (dq, dk, dv). A wrong term moves results far more: a causal mask off by
// one key, a missed rescale or a dropout mask off by one element by 1e-2 to 1, a D off by 1e-3 relative
// by 4e-4, an lse off by 1e-4 by 3e-5 (each tried).
constexpr double kForwardTol = 1e-5, kBackwardTol = 2e-5;

// Every instruction set on 1 thread; then 2 threads (tasks and scratch slots split differently; the split
// does not depend on the instruction set) on the best one.
TEST(Attention, FusedMatchesReferenceOverRaggedShapes) {
  const auto cases = sweep();
  for (size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    const Inputs in = make_inputs(c, 100 + n);
    set_num_threads(1);
    const Result want = run_reference(in);
    auto check = [&](int threads, const std::string& isa) {
      const Result got = run_fused(in, threads);
      const std::string where = describe(c) + " threads=" + std::to_string(threads) + " isa=" + isa;
      EXPECT_LE(rel_err(got.out, want.out), kForwardTol) << "out, " << where;
      EXPECT_LE(rel_err(got.dq, want.dq), kBackwardTol) << "dq, " << where;
      EXPECT_LE(rel_err(got.dkv, want.dkv), kBackwardTol) << "dk | dv, " << where;
    };
    test::for_each_isa([&](const std::string& isa) { check(1, isa); });
    set_num_threads(std::min(2, max_threads()));
    check(2, active_isa());
    set_num_threads(1);
    if (::testing::Test::HasFailure()) return;
  }
}

// The kernel runs as many tasks as its scratch has slots for: scratch planned for 1 task with 2 threads
// running, or for 2 tasks run from inside a parallel region (nested: inline), gives the same results.
TEST(Attention, FusedRunsWithFewerSlotsThanThreadsAndNested) {
  const Case c{3, 2, 16, 67, 67, true, true, 0.1f, 1.f};
  const Inputs in = make_inputs(c, 7);
  set_num_threads(1);
  const Result want = run_reference(in);
  set_num_threads(std::min(2, max_threads()));
  const Result few = run_fused(in, 1);
  Result nested;
  parallel_for(2, [&](int64_t b0, int64_t) {
    if (b0 == 0) nested = run_fused(in, 2);
  });
  set_num_threads(1);
  const Result* results[] = {&few, &nested};
  for (const Result* got : results) {
    EXPECT_LE(rel_err(got->out, want.out), kForwardTol);
    EXPECT_LE(rel_err(got->dq, want.dq), kBackwardTol);
    EXPECT_LE(rel_err(got->dkv, want.dkv), kBackwardTol);
  }
}

// Too little scratch is an error that names the size to ask for, never a write past the end.
TEST(Attention, FusedRejectsTooSmallScratch) {
  const Case c{1, 1, 4, 5, 5, false, false, 0.f, 1.f};
  const Inputs in = make_inputs(c, 3);
  std::vector<float> out(in.q.size()), lse(5), scratch(kernels::attention_scratch_size(5, 5, 4, 1) - 1);
  EXPECT_NE(test::message_of([&] {
              kernels::attention_forward(out, lse, scratch, in.q.data(), in.kv.data(), in.kv.data() + 4, in.shape);
            }).find("attention_scratch_size"),
            std::string::npos);
}

// A KV cache's view (q_pos, k_rows): the newest Tn queries of a causal sequence of T, against keys that sit
// in a cache of cap >= T rows per batch. Their outputs are the last Tn rows of the full causal attention
// over T (fused, every instruction set), and the fused forward and backward with the offsets match the
// reference with the same offsets (rows of the cache past T untouched). Tn spans one query, a part of a
// tile and more than a tile; T puts the new queries inside, at and across key blocks, up to a long context's many
// blocks (T 600 and 1100 for one and two new queries).
TEST(Attention, CacheOffsetsGiveTheRowsOfFullCausalAttention) {
  struct CacheCase {
    int B, H, hs, T, Tn, cap;
    bool pad;
  };
  const CacheCase cases[] = {
      {1, 4, 32, 1, 1, 8, false},     {2, 3, 5, 17, 1, 20, true},     {1, 2, 16, 64, 1, 64, false},
      {3, 2, 16, 65, 1, 70, true},    {2, 1, 8, 67, 3, 129, false},   {1, 4, 32, 130, 40, 256, true},
      {2, 2, 4, 100, 100, 101, true}, {2, 3, 7, 129, 70, 129, false}, {3, 2, 16, 66, 2, 80, true},
      {1, 2, 16, 600, 1, 640, true},  {2, 1, 8, 1100, 2, 1100, false}};
  for (const CacheCase& c : cases) {
    const int C = c.H * c.hs;
    const std::string where = "B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " hs=" + std::to_string(c.hs) +
                              " T=" + std::to_string(c.T) + " Tn=" + std::to_string(c.Tn) +
                              " cap=" + std::to_string(c.cap) + " pad=" + std::to_string(c.pad);
    // The full sequence: q (B,T,C), k | v (B,T,2C); and its padding (B,T), every third key from key 1.
    const auto q = test::randn(static_cast<size_t>(c.B) * c.T * C, c.T + 1);
    const auto kv = test::randn(static_cast<size_t>(c.B) * c.T * 2 * C, c.T + 2);
    std::vector<uint8_t> pad(static_cast<size_t>(c.B) * c.T, 0), cache_pad(static_cast<size_t>(c.B) * c.cap, 1);
    for (int b = 0; b < c.B; ++b)
      for (int s = 0; s < c.T; ++s) cache_pad[static_cast<size_t>(b) * c.cap + s] = pad[b * c.T + s] = s % 3 == 1;
    const kernels::AttentionShape full{c.B, c.T, c.T, C, c.H, C, 2 * C, c.pad ? pad.data() : nullptr, true, 0.f, 0};
    std::vector<float> want(q.size()), att(static_cast<size_t>(c.B) * c.H * c.T * c.T);
    kernels::attention_forward_reference(want, att, {}, q.data(), kv.data(), kv.data() + C, full);

    // The cache: (B, cap, 2C), rows past T hold NaN (never read); the new queries (B,Tn,C).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> cache(static_cast<size_t>(c.B) * c.cap * 2 * C, nan), qn(static_cast<size_t>(c.B) * c.Tn * C);
    for (int b = 0; b < c.B; ++b) {
      std::copy_n(kv.begin() + static_cast<std::ptrdiff_t>(b) * c.T * 2 * C, c.T * 2 * C,
                  cache.begin() + static_cast<std::ptrdiff_t>(b) * c.cap * 2 * C);
      std::copy_n(q.begin() + (static_cast<std::ptrdiff_t>(b) * c.T + c.T - c.Tn) * C, c.Tn * C,
                  qn.begin() + static_cast<std::ptrdiff_t>(b) * c.Tn * C);
    }
    kernels::AttentionShape s{c.B, c.Tn, c.T, C, c.H, C, 2 * C, c.pad ? cache_pad.data() : nullptr, true, 0.f, 0};
    s.q_pos = c.T - c.Tn;
    s.k_rows = c.cap;
    const float *k = cache.data(), *v = cache.data() + C;
    test::for_each_isa([&](const std::string& isa) {
      std::vector<float> out(qn.size(), nan), lse(static_cast<size_t>(c.B) * c.H * c.Tn, nan);
      std::vector<float> scratch(kernels::attention_scratch_size(c.Tn, c.T, c.hs, 2), nan);
      kernels::attention_forward(out, lse, scratch, qn.data(), k, v, s);
      double err = 0;
      for (int b = 0; b < c.B; ++b)
        for (int t = 0; t < c.Tn; ++t)
          for (int i = 0; i < C; ++i) {
            const float got = out[(static_cast<size_t>(b) * c.Tn + t) * C + i];
            const float w = want[(static_cast<size_t>(b) * c.T + c.T - c.Tn + t) * C + i];
            err = std::max(err, std::isnan(got) ? 1e9 : std::abs(static_cast<double>(got) - w));
          }
      EXPECT_LE(err, kForwardTol) << where << " isa=" << isa;

      // Backward with the offsets: fused against the reference; dk | dv rows past T are not written.
      const auto dout = test::randn(qn.size(), c.T + 3);
      const size_t tt = static_cast<size_t>(c.B) * c.H * c.Tn * c.T;
      std::vector<float> ref_out(qn.size()), ref_att(tt), datt(tt);
      std::vector<float> dq_ref(qn.size()), dkv_ref(cache.size(), nan), dq(qn.size(), nan), dkv(cache.size(), nan);
      kernels::attention_forward_reference(ref_out, ref_att, {}, qn.data(), k, v, s);
      kernels::attention_backward_reference(dq_ref.data(), dkv_ref.data(), dkv_ref.data() + C, datt, dout, qn.data(), k,
                                            v, ref_att, {}, s);
      kernels::attention_backward(dq.data(), dkv.data(), dkv.data() + C, scratch, dout, qn.data(), k, v, out, lse, s);
      EXPECT_LE(rel_err(dq, dq_ref), kBackwardTol) << "dq, " << where << " isa=" << isa;
      double dk_err = 0, mag = 1;
      for (int b = 0; b < c.B; ++b)
        for (int r = 0; r < c.cap; ++r)
          for (int i = 0; i < 2 * C; ++i) {
            const size_t at = (static_cast<size_t>(b) * c.cap + r) * 2 * C + i;
            if (r >= c.T) {
              ASSERT_TRUE(std::isnan(dkv[at])) << "row " << r << " past T was written, " << where;
              continue;
            }
            dk_err = std::max(dk_err, std::isnan(dkv[at]) ? 1e9 : std::abs(static_cast<double>(dkv[at]) - dkv_ref[at]));
            mag = std::max(mag, std::abs(static_cast<double>(dkv_ref[at])));
          }
      EXPECT_LE(dk_err / mag, kBackwardTol) << "dk | dv, " << where << " isa=" << isa;
    });
    if (::testing::Test::HasFailure()) return;
  }
}

// A model plans its scratch for its largest call and decodes with fewer rows: scratch sized for Tq queries serves a
// call of one or two over the same keys (a decoding step), with the results of scratch sized for the step itself.
TEST(Attention, ScratchForTqQueriesServesADecodingStep) {
  for (const int planned : {3, 40})
    for (const int Tn : {1, 2}) {
      const int B = 1, H = 2, hs = 4, C = H * hs, T = 700;
      const auto q = test::randn(static_cast<size_t>(B) * Tn * C, 5),
                 kv = test::randn(static_cast<size_t>(B) * T * 2 * C, 6);
      kernels::AttentionShape s{B, Tn, T, C, H, C, 2 * C, nullptr, true, 0.f, 0};
      s.q_pos = T - Tn;
      std::vector<float> want(q.size()), got(q.size()), lse(static_cast<size_t>(B) * H * Tn);
      std::vector<float> own(kernels::attention_scratch_size(Tn, T, hs, 1));
      kernels::attention_forward(want, lse, own, q.data(), kv.data(), kv.data() + C, s);
      std::vector<float> scratch(kernels::attention_scratch_size(planned, T, hs, 1));
      kernels::attention_forward(got, lse, scratch, q.data(), kv.data(), kv.data() + C, s);
      EXPECT_EQ(got, want) << "planned " << planned << " rows, " << Tn << " new";
    }
}

// The layer's weights() (recomputed on request) equal the reference's att for the same q and k, through
// masks, cross-attention and dropout (the weights are before dropout), also after a backward, and do
// not depend on the caller's mask buffer once the forward has returned.
TEST(Attention, LayerWeightsEqualReferenceAtt) {
  struct LayerCase {
    int B, Tq, Tk, C, H;
    bool causal, pad;
    float dropout;
  };
  const LayerCase cases[] = {
      {2, 9, 9, 12, 3, true, true, 0.f}, {3, 5, 70, 8, 2, false, true, 0.1f}, {1, 66, 66, 16, 4, true, false, 0.1f}};
  for (const LayerCase& c : cases) {
    nn::Parameters params;
    nn::MultiHeadAttention attn(params, "attn", c.C, c.H, true, 0.3f, 0.3f);
    params.finalize(5);
    for (nn::Param& p : params.all()) {
      const auto r = test::randn(p.numel, p.offset + 1, 0.3f);
      std::copy(r.begin(), r.end(), p.value.begin());
    }
    Workspace ws;
    ws.plan([&](Workspace& w) { attn.plan(w, c.B, c.Tq, c.Tk); });
    EXPECT_TRUE(attn.weights().empty());
    const auto xq = test::randn(static_cast<size_t>(c.B) * c.Tq * c.C, 11);
    const auto xkv = test::randn(static_cast<size_t>(c.B) * c.Tk * c.C, 12);
    auto pad = key_pad(c.B, c.Tk);
    const nn::AttentionMask mask{c.pad ? pad.data() : nullptr, c.causal};
    const nn::Dropout drop{c.dropout, 42};
    std::vector<float> y(xq.size());
    attn.forward(y, xq, xkv, mask, c.B, c.Tq, c.Tk, drop);
    const auto weights = attn.weights();

    // q and [k | v] as the layer makes them (the same gemm calls, so the same bits), then the reference.
    const float* w = params.all().front().value.data();  // in_proj_weight (3C, C)
    const float* bias = params.all()[1].value.data();    // in_proj_bias (3C)
    const int C = c.C, rq = c.B * c.Tq, rk = c.B * c.Tk;
    std::vector<float> q(static_cast<size_t>(rq) * C), kv(static_cast<size_t>(rk) * 2 * C);
    kernels::gemm(false, true, rq, C, C, 1.f, xq.data(), C, w, C, 0.f, q.data(), C);
    kernels::gemm(false, true, rk, 2 * C, C, 1.f, xkv.data(), C, w + static_cast<size_t>(C) * C, C, 0.f, kv.data(),
                  2 * C);
    for (int r = 0; r < rq; ++r)
      for (int i = 0; i < C; ++i) q[static_cast<size_t>(r) * C + i] += bias[i];
    for (int r = 0; r < rk; ++r)
      for (int i = 0; i < 2 * C; ++i) kv[static_cast<size_t>(r) * 2 * C + i] += bias[C + i];
    const size_t tt = static_cast<size_t>(c.B) * c.H * c.Tq * c.Tk;
    std::vector<float> out(q.size()), att(tt);
    const kernels::AttentionShape shape{c.B, c.Tq, c.Tk, C, c.H, C, 2 * C, mask.key_pad, c.causal, 0.f, 0};
    kernels::attention_forward_reference(out, att, {}, q.data(), kv.data(), kv.data() + C, shape);
    EXPECT_EQ(weights, att);

    std::vector<float> dx(xq.size()), dxkv(xkv.size());
    attn.backward(dx, dxkv, test::randn(y.size(), 13), xq, xkv, mask, c.B, c.Tq, c.Tk, drop);
    std::fill(pad.begin(), pad.end(), uint8_t{0});
    EXPECT_EQ(attn.weights(), att);
  }
}

}  // namespace
}  // namespace qkv::attention_test
