// Projections around the attention kernel:
//   q = xq W_q^T + b_q (B,Tq,C);  [k | v] = xkv [W_k | W_v]^T + [b_k | b_v] (B,Tk,2C)
//   y = attention(q, k, v) (B,Tq,C);  out = y W_o^T + b_o
// Backward: the out projection, the kernel, then dW_q += dq^T xq, dW_kv += dkv^T xkv, and
// dxq = dq W_q, dxkv += dkv W_kv.
#include "nn/attention.h"

#include <algorithm>

#include "qkv/error.h"
#include "qkv/thread_pool.h"

namespace qkv::nn {

MultiHeadAttention::MultiHeadAttention(Parameters& params, const std::string& prefix, int C, int H, bool bias,
                                       float init_std, float out_init_std)
    : C_(C),
      H_(H),
      stream_(params.new_stream()),
      w_in_(params.add(prefix + ".in_proj_weight", {3 * C, C}, Init::Normal, init_std)),
      b_in_(bias ? &params.add(prefix + ".in_proj_bias", {3 * C}, Init::Zeros) : nullptr),
      out_proj_(params, prefix + ".out_proj.weight", bias ? prefix + ".out_proj.bias" : "", C, C, out_init_std) {}

void MultiHeadAttention::plan(Workspace& ws, int B, int Tq, int Tk) {
  const size_t rq = static_cast<size_t>(B) * Tq, rk = static_cast<size_t>(B) * Tk;
  q_ = ws.take(rq * C_);
  kv_ = ws.take(rk * 2 * C_);
  y_ = ws.take(rq * C_);
  lse_ = ws.take(rq * H_);
  // Live only inside one forward or backward call: every attention module of the model shares them.
  scratch_ = ws.take_shared("attention.scratch",
                            kernels::attention_scratch_size(Tq, Tk, C_ / H_, std::min(max_threads(), B * H_)));
  dq_ = ws.take_shared("attention.dq", rq * C_);
  dkv_ = ws.take_shared("attention.dkv", rk * 2 * C_);
  dy_ = ws.take_shared("attention.dy", rq * C_);
  pad_.assign(rk, 0);
  has_last_ = false;  // q_ and kv_ are new buffers
}

kernels::AttentionShape MultiHeadAttention::shape(const AttentionMask& mask, int B, int Tq, int Tk,
                                                  const Dropout& drop) const {
  return {B, Tq, Tk, C_, H_, C_, 2 * C_, mask.key_pad, mask.causal, drop.p, drop.seed_for(stream_)};
}

void MultiHeadAttention::project_kv(float* kv, const float* x, int rows) {
  const int C = C_;
  kernels::gemm(false, true, rows, 2 * C, C, 1.f, x, C, w_in_.value.data() + static_cast<size_t>(C) * C, C, 0.f, kv,
                2 * C);
  if (!b_in_) return;
  const float* b = b_in_->value.data() + C;
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < 2 * C; ++i) kv[static_cast<size_t>(r) * 2 * C + i] += b[i];
}

void MultiHeadAttention::forward(Span out, CSpan xq, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk,
                                 const Dropout& drop, KvCache* cache) {
  const int rq = B * Tq, C = C_;
  kernels::gemm(false, true, rq, C, C, 1.f, xq.data(), C, w_in_.value.data(), C, 0.f, q_.data(), C);
  if (b_in_) {
    const float* b = b_in_->value.data();
    for (int r = 0; r < rq; ++r)
      for (int i = 0; i < C; ++i) q_[static_cast<size_t>(r) * C + i] += b[i];
  }
  if (cache) return forward_cached(out, xkv, mask, B, Tq, Tk, drop, *cache);
  project_kv(kv_.data(), xkv.data(), B * Tk);
  const kernels::AttentionShape s = shape(mask, B, Tq, Tk, drop);
  kernels::attention_forward(y_, lse_, scratch_, q_.data(), kv_.data(), kv_.data() + C, s);
  out_proj_.forward(out, y_, rq);
  last_ = s;
  if (mask.key_pad) {
    std::copy_n(mask.key_pad, B * Tk, pad_.begin());
    last_.key_pad = pad_.data();
  }
  has_last_ = true;
}

// The new rows' keys and values go into the cache (self-attention: after the `length` kept ones; cross-
// attention: the memory, on the first call only), then the queries attend over everything it holds.
void MultiHeadAttention::forward_cached(Span out, CSpan xkv, const AttentionMask& mask, int B, int Tq, int Tk,
                                        const Dropout& drop, KvCache& cache) {
  const int C = C_, start = cache.fixed ? 0 : cache.length;
  if (!cache.fixed || cache.length == 0) {
    check(start + Tk <= cache.capacity, "KV cache: ", start, " + ", Tk, " positions exceed its capacity of ",
          cache.capacity);
    project_kv(kv_.data(), xkv.data(), B * Tk);
    const size_t row = 2 * static_cast<size_t>(C);
    for (int b = 0; b < B; ++b)
      std::copy_n(kv_.data() + static_cast<size_t>(b) * Tk * row, Tk * row,
                  cache.kv + (static_cast<size_t>(b) * cache.capacity + start) * row);
    cache.length = start + Tk;
  }
  kernels::AttentionShape s = shape(mask, B, Tq, cache.length, drop);
  s.q_pos = cache.fixed ? 0 : start;
  s.k_rows = cache.capacity;
  kernels::attention_forward(y_, lse_, scratch_, q_.data(), cache.kv, cache.kv + C, s);
  out_proj_.forward(out, y_, B * Tq);
  has_last_ = false;  // the keys live in the cache, not in kv_
}

std::vector<float> MultiHeadAttention::weights() const {
  if (!has_last_) return {};
  std::vector<float> att(static_cast<size_t>(last_.B) * H_ * last_.Tq * last_.Tk);
  kernels::attention_weights(att, q_.data(), kv_.data(), last_);
  return att;
}

void MultiHeadAttention::backward(Span dxq, Span dxkv, CSpan dout, CSpan xq, CSpan xkv, const AttentionMask& mask,
                                  int B, int Tq, int Tk, const Dropout& drop) {
  const int rq = B * Tq, rk = B * Tk, C = C_;
  out_proj_.backward(dy_, dout, y_, rq);
  kernels::attention_backward(dq_.data(), dkv_.data(), dkv_.data() + C, scratch_, dy_, q_.data(), kv_.data(),
                              kv_.data() + C, y_, lse_, shape(mask, B, Tq, Tk, drop));
  float* dw = w_in_.grad.data();
  const float* w = w_in_.value.data();
  kernels::gemm(true, false, C, C, rq, 1.f, dq_.data(), C, xq.data(), C, 1.f, dw, C);
  kernels::gemm(true, false, 2 * C, C, rk, 1.f, dkv_.data(), 2 * C, xkv.data(), C, 1.f, dw + static_cast<size_t>(C) * C,
                C);
  if (b_in_) {
    float* db = b_in_->grad.data();
    for (int r = 0; r < rq; ++r)
      for (int i = 0; i < C; ++i) db[i] += dq_[static_cast<size_t>(r) * C + i];
    for (int r = 0; r < rk; ++r)
      for (int i = 0; i < 2 * C; ++i) db[C + i] += dkv_[static_cast<size_t>(r) * 2 * C + i];
  }
  kernels::gemm(false, false, rq, C, C, 1.f, dq_.data(), C, w, C, 0.f, dxq.data(), C);
  kernels::gemm(false, false, rk, C, 2 * C, 1.f, dkv_.data(), 2 * C, w + static_cast<size_t>(C) * C, C, 1.f,
                dxkv.data(), C);
}

}  // namespace qkv::nn
