// Projections around the attention op:
//   q = xq W_q^T + b_q (B,Tq,C);  [k | v] = xkv [W_k | W_v]^T + [b_k | b_v] (B,Tk,2C)
//   y = attention(q, k, v) (B,Tq,C);  out = y W_o^T + b_o
// Backward: the out projection, the op, then dW_q += dq^T xq, dW_kv += dkv^T xkv, db += column sums, and
// dxq = dq W_q, dxkv += dkv W_kv.
#include "nn/attention.h"

#include <algorithm>

#include "nn/weight_product.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

namespace qkv::nn {

MultiHeadAttention::MultiHeadAttention(Parameters& params, const std::string& prefix, int C, int H, bool bias,
                                       float init_std, float out_init_std)
    : params_(params),
      C_(C),
      H_(H),
      stream_(params.new_stream()),
      w_in_(params.add(prefix + ".in_proj_weight", {3 * C, C}, Init::Normal, init_std)),
      b_in_(bias ? &params.add(prefix + ".in_proj_bias", {3 * C}, Init::Zeros) : nullptr),
      site_q_(&params.add_lora_site(prefix + ".in_proj_q", "q", C, C, w_in_, 0)),
      site_k_(&params.add_lora_site(prefix + ".in_proj_k", "k", C, C, w_in_, C)),
      site_v_(&params.add_lora_site(prefix + ".in_proj_v", "v", C, C, w_in_, 2 * C)),
      site_qkv_(&params.add_lora_site(prefix + ".in_proj", "qkv", C, 3 * C, w_in_, 0)),
      out_proj_(params, prefix + ".out_proj.weight", bias ? prefix + ".out_proj.bias" : "", C, C, out_init_std, "out") {
  w_in_.matrix = true;
}

void MultiHeadAttention::plan(Workspace& ws, int B, int Tq, int Tk, const Saved& saved, const FeedForward::Spare& spare,
                              int cached_keys) {
  const size_t rq = static_cast<size_t>(B) * Tq, rk = static_cast<size_t>(B) * Tk;
  // With a KV cache, room for a decoding step's q, k and v together (forward): 3C floats at least.
  q_ = saved.take(ws, "q", std::max(rq, cached_keys > 0 ? size_t{3} : rq) * C_);
  kv_ = saved.take(ws, "kv", rk * 2 * C_);
  y_ = saved.take(ws, "y", rq * C_);
  lse_ = saved.take(ws, "lse", rq * H_);
  out_proj_.plan(ws, B * Tq, saved / "out");
  // Live only inside one forward or backward call: every attention module of the model shares them.
  // The largest call: the planned one, or one of Tq new rows against the cache's keys (forward_cached's shape).
  ops::AttentionShape s{B, Tq, Tk, C_, H_, C_, 2 * C_, nullptr, true, 0.f, 0};
  const int tasks = std::min(max_threads(), B * H_);
  size_t scratch = ops().attention_scratch_size(s, tasks);
  if (cached_keys > 0) {
    s.Tk = s.k_rows = cached_keys;
    scratch = std::max(scratch, ops().attention_scratch_size(s, tasks));
  }
  scratch_ = ws.take_shared("attention.scratch", scratch);
  bias_scratch_ = ws.take_shared("bias_act.scratch",
                                 ops().bias_act_backward_scratch_size(static_cast<int>(std::max(rq, rk)), 2 * C_));
  // dq and dy in the spare's first buffer, dkv in its second, when they fit (decided by sizes: the plan's counting
  // pass has the sizes, not the spans); else scratch every attention module of the model shares.
  const size_t q_floats = rq * C_, kv_floats = rk * 2 * C_;
  const bool in_spare = 2 * q_floats <= spare.floats && kv_floats <= spare.floats;
  const auto part = [](Span s, size_t offset, size_t n) { return s.empty() ? Span() : s.subspan(offset, n); };
  dq_ = in_spare ? part(spare.first, 0, q_floats) : ws.take_shared("attention.dq", q_floats);
  dy_ = in_spare ? part(spare.first, q_floats, q_floats) : ws.take_shared("attention.dy", q_floats);
  dkv_ = in_spare ? part(spare.second, 0, kv_floats) : ws.take_shared("attention.dkv", kv_floats);
  pad_ = ws.take_bytes(rk);
  dequant_ = ws.take_shared("weight.dequant", params_.frozen() ? weight_dx_scratch_size(w_in_) : 0);
  if (LoraAdapter* a = site_qkv_->adapter) a->plan(ws, static_cast<int>(rq), static_cast<int>(rk), saved / "qkv");
  if (LoraAdapter* a = site_q_->adapter) a->plan(ws, static_cast<int>(rq), 0, saved / "q");
  if (LoraAdapter* a = site_k_->adapter) a->plan(ws, static_cast<int>(rk), 0, saved / "k");
  if (LoraAdapter* a = site_v_->adapter) a->plan(ws, static_cast<int>(rk), 0, saved / "v");
  has_last_ = false;  // q_ and kv_ are new buffers
}

ops::AttentionShape MultiHeadAttention::shape(const AttentionMask& mask, int B, int Tq, int Tk,
                                              const Dropout& drop) const {
  return {B, Tq, Tk, C_, H_, C_, 2 * C_, mask.key_pad, mask.causal, drop.p, drop.seed_for(stream_)};
}

void MultiHeadAttention::project_kv(float* kv, const float* x, int rows, const Dropout& drop) {
  const int C = C_;
  weight_product(ops(), w_in_, C, 2 * C, x, C, rows, kv, 2 * C);  // rows C .. 3C of in_proj_weight: W_k | W_v
  // The adapters' products on the same rows: qkv's B rows C .. 3C, k's and v's whole B into their columns.
  if (LoraAdapter* a = site_qkv_->adapter) a->forward(ops(), 1, C, 2 * C, x, C, rows, kv, 2 * C, drop);
  if (LoraAdapter* a = site_k_->adapter) a->forward(ops(), 0, 0, C, x, C, rows, kv, 2 * C, drop);
  if (LoraAdapter* a = site_v_->adapter) a->forward(ops(), 0, 0, C, x, C, rows, kv + C, 2 * C, drop);
  const size_t n = static_cast<size_t>(rows) * 2 * C;
  if (b_in_) ops().bias_act_forward({kv, n}, {kv, n}, b_in_->value.subspan(C), ops::Act::Identity, rows, 2 * C);
}

void MultiHeadAttention::forward(Span out, CSpan xq, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk,
                                 const Dropout& drop, KvCache* cache) {
  const int rq = B * Tq, C = C_;
  // A decoding step's one new row attending to itself and the cache: q, k and v by one product over the whole of
  // in_proj_weight into q_'s first 3C floats, with its bias (one pass over x and one parallel region where q and
  // [k | v] took two, and for quantized weights x quantized once); each element is the same sum either way. Without
  // adapters only (theirs are per site).
  const bool adapters = site_qkv_->adapter || site_q_->adapter || site_k_->adapter || site_v_->adapter;
  if (cache && !cache->fixed && rq == 1 && B * Tk == 1 && xq.data() == xkv.data() && !adapters &&
      q_.size() >= static_cast<size_t>(3) * C) {
    const Span qkv = q_.first(static_cast<size_t>(3) * C);
    weight_linear_forward(ops(), w_in_, qkv, qkv, xq, b_in_ ? CSpan(b_in_->value) : CSpan(), ops::Act::Identity, 1);
    const int q_pos = cache->length;
    append_to_cache(*cache, qkv.data() + C, B, Tk);
    return attend_cached(out, mask, B, Tq, q_pos, drop, *cache);
  }
  const Span q = q_.first(static_cast<size_t>(rq) * C);
  weight_product(ops(), w_in_, 0, C, xq.data(), C, rq, q.data(), C);  // rows 0 .. C of in_proj_weight: W_q
  if (LoraAdapter* a = site_qkv_->adapter) a->forward(ops(), 0, 0, C, xq.data(), C, rq, q.data(), C, drop);
  if (LoraAdapter* a = site_q_->adapter) a->forward(ops(), 0, 0, C, xq.data(), C, rq, q.data(), C, drop);
  if (b_in_) ops().bias_act_forward(q, q, b_in_->value.first(C), ops::Act::Identity, rq, C);
  if (cache) return forward_cached(out, xkv, mask, B, Tq, Tk, drop, *cache);
  project_kv(kv_.data(), xkv.data(), B * Tk, drop);
  const ops::AttentionShape s = shape(mask, B, Tq, Tk, drop);
  ops().attention_forward(y_, lse_, q_.data(), kv_.data(), kv_.data() + C, s, scratch_);
  out_proj_.forward(out, y_, rq, drop);
  last_ = s;
  if (mask.key_pad) {
    ops().copy(pad_.data(), mask.key_pad, static_cast<size_t>(B) * Tk);
    last_.key_pad = pad_.data();
  }
  has_last_ = true;
}

// The new rows' keys and values go into the cache (self-attention: after the `length` kept ones; cross-
// attention: the memory, on the first call only), then the queries attend over everything it holds.
void MultiHeadAttention::forward_cached(Span out, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk,
                                        const Dropout& drop, KvCache& cache) {
  const int q_pos = cache.fixed ? 0 : cache.length;
  if (!cache.fixed || cache.length == 0) {
    project_kv(kv_.data(), xkv.data(), B * Tk, drop);
    append_to_cache(cache, kv_.data(), B, Tk);
  }
  attend_cached(out, mask, B, Tq, q_pos, drop, cache);
}

// kv (B,Tk,2C), rows 2C apart, after the cache's kept rows (none for a cross-attention's memory).
void MultiHeadAttention::append_to_cache(KvCache& cache, const float* kv, int B, int Tk) {
  const int C = C_, start = cache.fixed ? 0 : cache.length;
  check(start + Tk <= cache.capacity, "KV cache: ", start, " + ", Tk, " positions exceed its capacity of ",
        cache.capacity);
  // Batch row b's Tk new rows of 2C go after its `start` kept ones: one strided copy of B*Tk rows would need
  // a stride that changes at each batch boundary, so one copy per batch row.
  const size_t row = 2 * static_cast<size_t>(C);
  for (int b = 0; b < B; ++b)
    ops().copy_rows(cache.kv + (static_cast<size_t>(b) * cache.capacity + start) * row, 2 * C,
                    kv + static_cast<size_t>(b) * Tk * row, 2 * C, Tk, 2 * C);
  cache.length = start + Tk;
}

// The queries in q_ (B,Tq,C), the first at position q_pos, attend over every position the cache holds.
void MultiHeadAttention::attend_cached(Span out, const AttentionMask& mask, int B, int Tq, int q_pos,
                                       const Dropout& drop, KvCache& cache) {
  const int C = C_;
  ops::AttentionShape s = shape(mask, B, Tq, cache.length, drop);
  s.q_pos = q_pos;
  s.k_rows = cache.capacity;
  ops().attention_forward(y_, lse_, q_.data(), cache.kv, cache.kv + C, s, scratch_);
  out_proj_.forward(out, y_, B * Tq, drop);
  has_last_ = false;  // the keys live in the cache, not in kv_
}

std::vector<float> MultiHeadAttention::weights() const {
  if (!has_last_) return {};
  const size_t n = static_cast<size_t>(last_.B) * H_ * last_.Tq * last_.Tk;
  // Inspection, outside any training step: a buffer of the model's device for this call alone.
  Tensor att({static_cast<int64_t>(n)}, ops().device());
  ops().attention_weights(att.span(), q_.data(), kv_.data(), last_);
  std::vector<float> host(n);
  ops().download(host.data(), att.data(), n * sizeof(float));
  return host;
}

void MultiHeadAttention::backward(Span dxq, Span dxkv, CSpan dout, CSpan xq, CSpan xkv, const AttentionMask& mask,
                                  int B, int Tq, int Tk, const Dropout& drop) {
  const int rq = B * Tq, rk = B * Tk, C = C_;
  out_proj_.backward(dy_, dout, y_, rq);
  ops().attention_backward(dq_.data(), dkv_.data(), dkv_.data() + C, dy_, q_.data(), kv_.data(), kv_.data() + C, y_,
                           lse_, shape(mask, B, Tq, Tk, drop), scratch_);
  if (!params_.frozen()) {
    float* dw = w_in_.grad.data();
    ops().gemm(true, false, C, C, rq, 1.f, dq_.data(), C, xq.data(), C, 1.f, dw, C);
    ops().gemm(true, false, 2 * C, C, rk, 1.f, dkv_.data(), 2 * C, xkv.data(), C, 1.f, dw + static_cast<size_t>(C) * C,
               C);
    if (b_in_) {
      // db_q += column sums of dq (rq, C); db_kv += column sums of dkv (rk, 2C)
      const Span db = b_in_->grad;
      ops().bias_act_backward({}, db.first(C), dq_.first(static_cast<size_t>(rq) * C), {}, ops::Act::Identity, rq, C,
                              bias_scratch_);
      ops().bias_act_backward({}, db.subspan(C), dkv_.first(static_cast<size_t>(rk) * 2 * C), {}, ops::Act::Identity,
                              rk, 2 * C, bias_scratch_);
    }
  }
  // dxq = dq W_q; dxkv += dkv W_kv (a frozen quantized base: through its dequantized rows)
  weight_product_dx(ops(), w_in_, 0, C, dq_.data(), C, rq, dxq.data(), C, 0.f, dequant_);
  weight_product_dx(ops(), w_in_, C, 2 * C, dkv_.data(), 2 * C, rk, dxkv.data(), C, 1.f, dequant_);
  // The adapters' gradients, and their parts of dxq and dxkv (added: in self-attention they are one buffer).
  if (LoraAdapter* a = site_qkv_->adapter) {
    a->backward(ops(), 0, 0, C, dq_.data(), C, xq.data(), rq, dxq.data(), drop);
    a->backward(ops(), 1, C, 2 * C, dkv_.data(), 2 * C, xkv.data(), rk, dxkv.data(), drop);
  }
  if (LoraAdapter* a = site_q_->adapter) a->backward(ops(), 0, 0, C, dq_.data(), C, xq.data(), rq, dxq.data(), drop);
  if (LoraAdapter* a = site_k_->adapter)
    a->backward(ops(), 0, 0, C, dkv_.data(), 2 * C, xkv.data(), rk, dxkv.data(), drop);
  if (LoraAdapter* a = site_v_->adapter)
    a->backward(ops(), 0, 0, C, dkv_.data() + C, 2 * C, xkv.data(), rk, dxkv.data(), drop);
}

}  // namespace qkv::nn
