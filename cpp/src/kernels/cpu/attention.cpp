// Fused multi-head attention (FlashAttention-2's scheme on a CPU): the (Tq,Tk) score matrix of a
// (batch, head) pair is never materialised; it is walked in tiles of queries x keys (sizes below) that
// stay in a thread's scratch. One (batch, head) pair per task, so a head's outputs have one writer.
// Legend: Tq queries, Tk keys, hs = C/H; per tile: rows = its queries, cols = its keys.
//
// Forward, per block of query rows, over the key blocks left to right (online softmax):
//   S = q k^T / sqrt(hs)                          (rows, cols) tile, masked entries -inf
//   m' = max(m, rowmax(S));  P = exp(S - m');  alpha = exp(m - m')
//   l = alpha * l + rowsum(P);  O = alpha * O + dropout(P) v
// then out = O / l (= softmax(S) v, with every key block's exp taken against the final max), and
// lse = m + log(l) per row, the only thing saved: P = exp(S - lse) recomputes the weights to float
// rounding (lse carries about |S| * 2^-24 of it, as S itself does).
//
// Backward, per key block, over the query blocks that can see it (P recomputed from q, k and lse):
//   dPd = dout v^T;  dv += dropout(P)^T dout;  dP = dropout_backward(dPd)
//   dS = P * (dP - D),  D = rowsum(dP * P) = rowsum(dout * out)  (out = dropout(P) v), taken once per row
//   dq += dS k / sqrt(hs);  dk += dS^T q / sqrt(hs)
// The dropout mask of element (b,h,t,s) is dropout_hash(seed, ((b*H + h)*Tq + t)*Tk + s), the same as the
// reference's, recomputed in both passes. Under the causal mask, key blocks wholly right of a query
// block's last row are skipped. Tile products go through gemm; the row passes (max, exp, the dS
// formula, D) through the selection table below, SIMD per instruction set.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/transpose.h"
#include "kernels/kernels.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {
namespace {

// Tile sizes, queries x keys, measured on the char GPT (T 64, hs 32) and the tutorial seq2seq (T 100,
// hs 64): the forward runs 64 x 64 tiles, or 32 x 64 under the causal mask, where a narrower query block
// spends less on the masked triangle of the diagonal tiles; the backward, with five products per tile
// to the forward's two, runs 32 x 32 (as fast without a mask, 20% faster with the causal one).
constexpr int kForwardQ = 64, kForwardCausalQ = 32, kForwardK = 64, kBackwardQ = 32, kBackwardK = 32;

// One pass's tiles: bq queries x bk keys, rows ld apart; ld rounds bk up to 16 floats (the widest vector)
// so that the row passes run whole vectors (attention_rows.h).
struct Blocks {
  int bq, bk, ld;
};
Blocks blocks(int Tq, int Tk, int max_q, int max_k) {
  const int bk = std::min(max_k, Tk);
  return {std::min(max_q, Tq), bk, (bk + 15) / 16 * 16};
}

// One task's scratch, shared by both passes, as offsets in floats: the tiles S, dP and dropout(P)
// (bq, ld); a key block's k and v transposed, kt and vt (hs, ld), so that every tile product is gemm's
// non-transposed-B kind; m, l, alpha (the forward's bq); the padding bias (ld); D (Tq). Sized for the
// larger forward tile, with or without the causal mask.
struct Slot {
  Blocks fwd, bwd;
  size_t S, dP, Pd, kt, vt, m, l, alpha, bias, D, floats;
};
Slot slot_for(int Tq, int Tk, int hs) {
  Slot t{};
  t.fwd = blocks(Tq, Tk, kForwardQ, kForwardK);
  t.bwd = blocks(Tq, Tk, kBackwardQ, kBackwardK);
  const size_t tile = std::max(static_cast<size_t>(t.fwd.bq) * t.fwd.ld, static_cast<size_t>(t.bwd.bq) * t.bwd.ld);
  const int ld = std::max(t.fwd.ld, t.bwd.ld);
  const size_t kt = static_cast<size_t>(hs) * ld;
  t.S = 0;
  t.dP = t.S + tile;
  t.Pd = t.dP + tile;
  t.kt = t.Pd + tile;
  t.vt = t.kt + kt;
  t.m = t.vt + kt;
  t.l = t.m + t.fwd.bq;
  t.alpha = t.l + t.fwd.bq;
  t.bias = t.alpha + t.fwd.bq;
  t.D = t.bias + ld;
  t.floats = (t.D + Tq + 15) / 16 * 16;  // keeps each slot 64-byte aligned
  return t;
}

// dst (hs, ld) = src (cols, hs) with row stride lds, transposed, zero in the columns [cols, ld): gemm's
// packing copy (transpose.h), k outer with the width ld fixed at compile time; the element-at-a-time scatter
// it replaced was half of the attention backward's own time (outside its products and row passes).
void transpose(float* dst, int ld, const float* src, int lds, int cols, int hs) {
  pack_transposed(dst, ld, src, lds, cols, hs);
}

// The scalar row passes: what attention_simd.h computes, one element at a time.
void softmax_rows_scalar(const AttentionTile& t, float* m, float* l, float* alpha) {
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.S + static_cast<size_t>(r) * t.ld;
    const int n = std::clamp(r + t.diag + 1, 0, t.cols);
    float mx = -INFINITY;
    for (int j = 0; j < n; ++j) {
      if (t.bias) s[j] += t.bias[j];
      mx = std::max(mx, s[j]);
    }
    const float m_new = std::max(m[r], mx);
    if (m_new == -INFINITY) {
      std::fill(s, s + t.cols, 0.f);
      alpha[r] = 1.f;
      continue;
    }
    float sum = 0.f;
    for (int j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - m_new);
    std::fill(s + n, s + t.cols, 0.f);
    alpha[r] = std::exp(m[r] - m_new);
    l[r] = l[r] * alpha[r] + sum;
    m[r] = m_new;
  }
}

void probs_rows_scalar(const AttentionTile& t, const float* lse) {
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.S + static_cast<size_t>(r) * t.ld;
    const int n = std::clamp(r + t.diag + 1, 0, t.cols);
    for (int j = 0; j < n; ++j) s[j] = std::exp(s[j] + (t.bias ? t.bias[j] : 0.f) - lse[r]);
    std::fill(s + n, s + t.cols, 0.f);
  }
}

void dscores_rows_scalar(const AttentionTile& t, float* dP, const float* D) {
  for (int r = 0; r < t.rows; ++r) {
    const float* p = t.S + static_cast<size_t>(r) * t.ld;
    float* d = dP + static_cast<size_t>(r) * t.ld;
    for (int j = 0; j < t.cols; ++j) d[j] = p[j] * (d[j] - D[r]);
  }
}

void delta_rows_scalar(float* D, const float* dO, const float* O, int ld, int rows, int hs) {
  for (int r = 0; r < rows; ++r) {
    const float *a = dO + static_cast<size_t>(r) * ld, *o = O + static_cast<size_t>(r) * ld;
    float d = 0.f;
    for (int i = 0; i < hs; ++i) d += a[i] * o[i];
    D[r] = d;
  }
}

// The selection table: best instruction set first, scalar last.
struct RowPasses {
  void (*softmax)(const AttentionTile&, float*, float*, float*);
  void (*probs)(const AttentionTile&, const float*);
  void (*dscores)(const AttentionTile&, float*, const float*);
  void (*delta)(float*, const float*, const float*, int, int, int);
};

template <class Arch>
RowPasses passes_for() {
  return {&attention_softmax_rows<Arch>, &attention_probs_rows<Arch>, &attention_dscores_rows<Arch>,
          &attention_delta_rows<Arch>};
}

RowPasses select() {
  switch (active_isa()) {
#if QKV_ISA_AVX512
    case Isa::AVX512: return passes_for<xsimd::avx512f>();
#endif
#if QKV_ISA_AVX2
    case Isa::AVX2: return passes_for<xsimd::fma3<xsimd::avx2>>();
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return passes_for<xsimd::sse4_1>();
#endif
#if QKV_ISA_NEON
    case Isa::NEON: return passes_for<xsimd::neon64>();
#endif
    default: return {&softmax_rows_scalar, &probs_rows_scalar, &dscores_rows_scalar, &delta_rows_scalar};
  }
}

// What both passes share about one (batch, head) pair.
struct Head {
  int b, h;
  size_t qo, ko;       // offsets of the head's first column in row 0 of its batch: q, dq (qo); k, v, dk, dv (ko)
  const uint8_t* pad;  // (Tk) or nullptr
  float* w;            // this task's scratch slot
};

// Runs fn(head) for every (batch, head) pair: at most one task per thread and per scratch slot, each
// task a contiguous range of pairs with its own slot.
template <class F>
void for_each_head(const AttentionShape& s, Span scratch, const Slot& slot, F&& fn) {
  const int64_t heads = static_cast<int64_t>(s.B) * s.H;
  const int64_t slots = static_cast<int64_t>(scratch.size() / slot.floats);
  check(slots >= 1, "attention: scratch holds ", scratch.size(), " floats: expected at least ", slot.floats,
        " (attention_scratch_size)");
  const int64_t tasks = std::min({heads, slots, static_cast<int64_t>(num_threads())});
  const int hs = s.C / s.H;
  parallel_for(tasks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      for (int64_t p = heads * c / tasks; p < heads * (c + 1) / tasks; ++p) {
        const int b = static_cast<int>(p / s.H), h = static_cast<int>(p % s.H);
        const size_t qo = static_cast<size_t>(b) * s.Tq * s.ldq + h * hs;
        const size_t ko = static_cast<size_t>(b) * s.key_rows() * s.ldkv + h * hs;
        fn(Head{b, h, qo, ko, s.key_pad ? s.key_pad + static_cast<size_t>(b) * s.key_rows() : nullptr,
                scratch.data() + c * slot.floats});
      }
    }
  });
}

// bias (cols) = -inf for the padded keys among [s0, s0 + cols); nullptr without a padding mask.
const float* pad_bias(float* bias, const uint8_t* pad, int s0, int cols) {
  if (!pad) return nullptr;
  for (int j = 0; j < cols; ++j) bias[j] = pad[s0 + j] ? -INFINITY : 0.f;
  return bias;
}

}  // namespace

size_t attention_scratch_size(int Tq, int Tk, int hs, int tasks) { return slot_for(Tq, Tk, hs).floats * tasks; }

void attention_forward(Span out, Span lse, Span scratch, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
  const int hs = s.C / s.H, Tq = s.Tq, Tk = s.Tk;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const bool drop = s.dropout > 0.f;
  const uint32_t threshold = dropout_threshold(s.dropout);
  const float keep_scale = drop ? 1.f / (1.f - s.dropout) : 1.f;
  const Slot slot = slot_for(Tq, Tk, hs);
  // Plain ints, not structured bindings, which Emscripten's clang 14 cannot capture in the lambda below.
  const Blocks tiles = blocks(Tq, Tk, s.causal ? kForwardCausalQ : kForwardQ, kForwardK);
  const int bq = tiles.bq, bk = tiles.bk, ld = tiles.ld;
  const RowPasses passes = select();
  for_each_head(s, scratch, slot, [&](const Head& hd) {
    float *S = hd.w + slot.S, *kt = hd.w + slot.kt, *bias = hd.w + slot.bias;
    float *m = hd.w + slot.m, *l = hd.w + slot.l, *alpha = hd.w + slot.alpha;
    const float *qh = q + hd.qo, *kh = k + hd.ko, *vh = v + hd.ko;
    float* O = out.data() + static_cast<size_t>(hd.b) * Tq * s.C + hd.h * hs;  // (Tq,hs), stride C
    float* lse_h = lse.data() + (static_cast<size_t>(hd.b) * s.H + hd.h) * Tq;
    const size_t drop_base = (static_cast<size_t>(hd.b) * s.H + hd.h) * Tq;  // the mask's row index
    for (int t0 = 0; t0 < Tq; t0 += bq) {
      const int rows = std::min(bq, Tq - t0);
      float* Ot = O + static_cast<size_t>(t0) * s.C;
      // O needs no zeroing: the first key block writes it (beta 0), later ones rescale and accumulate.
      for (int r = 0; r < rows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.f;
      }
      // The block's last query sees keys < s_end.
      const int s_end = s.causal ? std::min(Tk, t0 + rows + s.q_pos) : Tk;
      for (int s0 = 0; s0 < s_end; s0 += bk) {
        const int cols = std::min(bk, s_end - s0);
        // S = q_i k_j^T / sqrt(hs), then P and the running m, l; the output so far is rescaled by alpha.
        const float* qi = qh + static_cast<size_t>(t0) * s.ldq;
        if (rows <= 2) {  // a KV cache's new token or two: dot products with the keys in place, no transpose
          gemm(false, true, rows, cols, hs, scale, qi, s.ldq, kh + static_cast<size_t>(s0) * s.ldkv, s.ldkv, 0.f, S,
               ld);
        } else {
          transpose(kt, ld, kh + static_cast<size_t>(s0) * s.ldkv, s.ldkv, cols, hs);
          gemm(false, false, rows, cols, hs, scale, qi, s.ldq, kt, ld, 0.f, S, ld);
        }
        const AttentionTile tile{
            S, ld, rows, cols, pad_bias(bias, hd.pad, s0, cols), s.causal ? t0 + s.q_pos - s0 : cols};
        passes.softmax(tile, m, l, alpha);
        for (int r = 0; r < rows && s0 > 0; ++r) {
          if (alpha[r] == 1.f) continue;
          float* o = Ot + static_cast<size_t>(r) * s.C;
          for (int i = 0; i < hs; ++i) o[i] *= alpha[r];
        }
        if (drop) {
          for (int r = 0; r < rows; ++r) {
            float* p = S + static_cast<size_t>(r) * ld;
            const size_t base = (drop_base + t0 + r) * Tk + s0;
            for (int j = 0; j < cols; ++j) p[j] = dropout_hash(s.seed, base + j) >= threshold ? p[j] * keep_scale : 0.f;
          }
        }
        gemm(false, false, rows, hs, cols, 1.f, S, ld, vh + static_cast<size_t>(s0) * s.ldkv, s.ldkv,
             s0 == 0 ? 0.f : 1.f, Ot, s.C);  // O (+)= dropout(P) v_j
      }
      for (int r = 0; r < rows; ++r) {
        float* o = Ot + static_cast<size_t>(r) * s.C;
        if (l[r] > 0.f) {
          const float inv = 1.f / l[r];
          for (int i = 0; i < hs; ++i) o[i] *= inv;
          lse_h[t0 + r] = m[r] + std::log(l[r]);
        } else {  // every key masked: output 0, and lse = +inf makes the backward's P = exp(S - lse) 0
          std::fill_n(o, hs, 0.f);
          lse_h[t0 + r] = INFINITY;
        }
      }
    }
  });
}

void attention_backward(float* dq, float* dk, float* dv, Span scratch, CSpan dout, const float* q, const float* k,
                        const float* v, CSpan out, CSpan lse, const AttentionShape& s) {
  const int hs = s.C / s.H, Tq = s.Tq, Tk = s.Tk;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const bool drop = s.dropout > 0.f;
  const uint32_t threshold = dropout_threshold(s.dropout);
  const float keep_scale = drop ? 1.f / (1.f - s.dropout) : 1.f;
  const Slot slot = slot_for(Tq, Tk, hs);
  const int bq = slot.bwd.bq, bk = slot.bwd.bk, ld = slot.bwd.ld;
  const RowPasses passes = select();
  for_each_head(s, scratch, slot, [&](const Head& hd) {
    float *S = hd.w + slot.S, *dP = hd.w + slot.dP, *Pd = hd.w + slot.Pd;
    float *kt = hd.w + slot.kt, *vt = hd.w + slot.vt, *bias = hd.w + slot.bias, *D = hd.w + slot.D;
    const float *qh = q + hd.qo, *kh = k + hd.ko, *vh = v + hd.ko;
    float *dqh = dq + hd.qo, *dkh = dk + hd.ko, *dvh = dv + hd.ko;
    const size_t oo = static_cast<size_t>(hd.b) * Tq * s.C + hd.h * hs;
    const float* dO = dout.data() + oo;  // (Tq,hs), stride C, like out
    const float* O = out.data() + oo;
    const float* lse_h = lse.data() + (static_cast<size_t>(hd.b) * s.H + hd.h) * Tq;
    const size_t drop_base = (static_cast<size_t>(hd.b) * s.H + hd.h) * Tq;
    passes.delta(D, dO, O, s.C, Tq, hs);
    // dq, dk and dv need no zeroing (per row, a memset call of hs floats: 1% of the char GPT's step): the
    // first key block writes dq (beta 0; it is seen by every query block), the first query block that sees
    // key block j writes dk_j and dv_j, and later ones accumulate.
    if (Tk == 0)
      for (int t = 0; t < Tq; ++t) std::fill_n(dqh + static_cast<size_t>(t) * s.ldq, hs, 0.f);
    for (int s0 = 0; s0 < Tk; s0 += bk) {
      const int cols = std::min(bk, Tk - s0);
      const float* kj = kh + static_cast<size_t>(s0) * s.ldkv;
      float* dkj = dkh + static_cast<size_t>(s0) * s.ldkv;
      float* dvj = dvh + static_cast<size_t>(s0) * s.ldkv;
      const float* bias_j = pad_bias(bias, hd.pad, s0, cols);
      transpose(kt, ld, kj, s.ldkv, cols, hs);
      transpose(vt, ld, vh + static_cast<size_t>(s0) * s.ldkv, s.ldkv, cols, hs);
      // Causal: queries t < s0 - q_pos see none of these keys; start at the query block holding the first
      // one that does.
      float kv_beta = 0.f;  // 1 once a query block has written dk_j and dv_j
      for (int t0 = s.causal ? std::max(0, s0 - s.q_pos) / bq * bq : 0; t0 < Tq; t0 += bq) {
        const int rows = std::min(bq, Tq - t0);
        const float* qi = qh + static_cast<size_t>(t0) * s.ldq;
        const float* dOi = dO + static_cast<size_t>(t0) * s.C;
        gemm(false, false, rows, cols, hs, scale, qi, s.ldq, kt, ld, 0.f, S, ld);  // S = q_i k_j^T / sqrt(hs)
        const AttentionTile tl{S, ld, rows, cols, bias_j, s.causal ? t0 + s.q_pos - s0 : cols};
        passes.probs(tl, lse_h + t0);                                            // P = exp(S - lse)
        gemm(false, false, rows, cols, hs, 1.f, dOi, s.C, vt, ld, 0.f, dP, ld);  // dPd = dout_i v_j^T
        const float* Pv = S;
        if (drop) {  // dropout(P) for dv, and dP = dropout_backward(dPd) in place: one hash per element
          for (int r = 0; r < rows; ++r) {
            const float* p = S + static_cast<size_t>(r) * ld;
            float* pd = Pd + static_cast<size_t>(r) * ld;
            float* d = dP + static_cast<size_t>(r) * ld;
            const size_t base = (drop_base + t0 + r) * Tk + s0;
            for (int j = 0; j < cols; ++j) {
              const bool keep = dropout_hash(s.seed, base + j) >= threshold;
              pd[j] = keep ? p[j] * keep_scale : 0.f;
              d[j] = keep ? d[j] * keep_scale : 0.f;
            }
          }
          Pv = Pd;
        }
        gemm(true, false, cols, hs, rows, 1.f, Pv, ld, dOi, s.C, kv_beta, dvj,
             s.ldkv);                    // dv_j (+)= dropout(P)^T dout_i
        passes.dscores(tl, dP, D + t0);  // dS = P * (dP - D)
        float* dqi = dqh + static_cast<size_t>(t0) * s.ldq;
        gemm(false, false, rows, hs, cols, scale, dP, ld, kj, s.ldkv, s0 == 0 ? 0.f : 1.f, dqi,
             s.ldq);  // dq_i (+)= dS k_j / sqrt(hs)
        gemm(true, false, cols, hs, rows, scale, dP, ld, qi, s.ldq, kv_beta, dkj,
             s.ldkv);  // dk_j (+)= dS^T q_i / sqrt(hs)
        kv_beta = 1.f;
      }
      if (kv_beta == 0.f) {  // no query sees these keys
        for (int j = 0; j < cols; ++j) {
          std::fill_n(dkj + static_cast<size_t>(j) * s.ldkv, hs, 0.f);
          std::fill_n(dvj + static_cast<size_t>(j) * s.ldkv, hs, 0.f);
        }
      }
    }
  });
}

}  // namespace qkv::kernels
