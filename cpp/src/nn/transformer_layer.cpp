#include "nn/transformer_layer.h"

namespace qkv::nn {

EncoderLayer::EncoderLayer(Parameters& params, const std::string& prefix, const LayerOptions& o)
    : C_(o.C),
      attn_(params, prefix + "self_attn", o.C, o.H, o.bias, o.init_std, o.out_init_std),
      ffn_(params, prefix, o.C, o.F, o.activation, o.bias, o.init_std, o.out_init_std),
      attn_res_(params, prefix + "norm1", o.C, o.norm, o.dropout),
      ffn_res_(params, prefix + "norm2", o.C, o.norm, o.dropout) {}

void EncoderLayer::plan(Workspace& ws, int B, int T, const Saved& saved, int cached_keys) {
  const int rows = B * T;
  ffn_.plan(ws, rows, saved / "ffn");
  const FeedForward::Spare spare = ffn_.spare();
  attn_.plan(ws, B, T, T, saved / "attn", spare, cached_keys);  // its backward runs after the feed-forward's
  // The rest of the layer's backward scratch, (R, C) each, in the feed-forward's buffers too when they hold 3 R C
  // (F >= 3C; the attention's dq and dy take the first's [0, 2RC), its dkv the second's): the feed-forward
  // block's dn (the feed-forward's dx) at the start of `free`, which its backward has finished reading; dx1 (written
  // by that block's norm while it reads dn, then read by the attention block) at [2RC, 3RC) of the first; the
  // attention block's dn (the attention's dx) at [2RC, 3RC) of the second. GPT-2 124M at 8 x 128: 9 MiB.
  const size_t n = static_cast<size_t>(rows) * C_;
  const bool room = spare.floats >= 3 * n;
  const auto part = [](Span s, size_t offset, size_t count) { return s.empty() ? Span() : s.subspan(offset, count); };
  const Span ffn_dn = part(spare.free, 0, n), attn_dn = part(spare.second, 2 * n, n);
  // Shared only when recomputing: then every layer normalises its own input (EncoderStack); otherwise, pre-LN, the
  // previous layer's last add writes this norm into the layer's own buffer.
  attn_res_.plan(ws, rows, saved / "attn_res", room ? &attn_dn : nullptr);
  ffn_res_.plan(ws, rows, saved / "ffn_res", room ? &ffn_dn : nullptr);
  x1_ = saved.take(ws, "x1", n);
  dx1_ = room ? part(spare.first, 2 * n, n) : ws.take_shared("layer.dx1", n);  // inside one backward call
}

void EncoderLayer::forward(Span y, CSpan x, const AttentionMask& mask, int B, int T, const Dropout& drop, bool x_normed,
                           const NormInto& next, KvCache* cache) {
  const int rows = B * T;
  const NormInto mid = ffn_res_.input_norm();  // pre-LN: the FFN's norm runs in the attention's add
  attn_res_.forward(
      x1_, x, rows, drop, [&](Span out, CSpan in) { attn_.forward(out, in, in, mask, B, T, T, drop, cache); }, x_normed,
      mid);
  ffn_res_.forward(
      y, x1_, rows, drop, [&](Span out, CSpan in) { ffn_.forward(out, in, rows, drop); }, mid.norm != nullptr, next);
}

void EncoderLayer::backward(Span dx, CSpan dy, CSpan x, const AttentionMask& mask, int B, int T, const Dropout& drop) {
  const int rows = B * T;
  ffn_res_.backward(dx1_, dy, x1_, rows, drop,
                    [&](Span din, CSpan dout, CSpan in) { ffn_.backward(din, dout, in, rows, drop); });
  attn_res_.backward(dx, dx1_, x, rows, drop, [&](Span din, CSpan dout, CSpan in) {
    attn_.backward(din, din, dout, in, in, mask, B, T, T, drop);
  });
}

DecoderLayer::DecoderLayer(Parameters& params, const std::string& prefix, const LayerOptions& o)
    : C_(o.C),
      self_attn_(params, prefix + "self_attn", o.C, o.H, o.bias, o.init_std, o.out_init_std),
      cross_attn_(params, prefix + "multihead_attn", o.C, o.H, o.bias, o.init_std, o.out_init_std),
      ffn_(params, prefix, o.C, o.F, o.activation, o.bias, o.init_std, o.out_init_std),
      self_res_(params, prefix + "norm1", o.C, o.norm, o.dropout),
      cross_res_(params, prefix + "norm2", o.C, o.norm, o.dropout),
      ffn_res_(params, prefix + "norm3", o.C, o.norm, o.dropout) {}

void DecoderLayer::plan(Workspace& ws, int B, int T, int S) {
  const int rows = B * T;
  ffn_.plan(ws, rows);
  // Both attention backwards run after the feed-forward's, one after the other.
  self_attn_.plan(ws, B, T, T, {}, ffn_.spare());
  cross_attn_.plan(ws, B, T, S, {}, ffn_.spare());
  self_res_.plan(ws, rows);
  cross_res_.plan(ws, rows);
  ffn_res_.plan(ws, rows);
  x1_ = ws.take(static_cast<size_t>(rows) * C_);
  x2_ = ws.take(static_cast<size_t>(rows) * C_);
  dx1_ = ws.take_shared("layer.dx1", static_cast<size_t>(rows) * C_);  // inside one backward call
  dx2_ = ws.take_shared("layer.dx2", static_cast<size_t>(rows) * C_);
}

void DecoderLayer::forward(Span y, CSpan x, CSpan memory, const AttentionMask& self_mask,
                           const AttentionMask& memory_mask, int B, int T, int S, const Dropout& drop, bool x_normed,
                           const NormInto& next, KvCache* self_cache, KvCache* cross_cache) {
  const int rows = B * T;
  const NormInto cross_in = cross_res_.input_norm(), ffn_in = ffn_res_.input_norm();  // pre-LN: chained
  self_res_.forward(
      x1_, x, rows, drop,
      [&](Span out, CSpan in) { self_attn_.forward(out, in, in, self_mask, B, T, T, drop, self_cache); }, x_normed,
      cross_in);
  cross_res_.forward(
      x2_, x1_, rows, drop,
      [&](Span out, CSpan in) { cross_attn_.forward(out, in, memory, memory_mask, B, T, S, drop, cross_cache); },
      cross_in.norm != nullptr, ffn_in);
  ffn_res_.forward(
      y, x2_, rows, drop, [&](Span out, CSpan in) { ffn_.forward(out, in, rows, drop); }, ffn_in.norm != nullptr, next);
}

void DecoderLayer::backward(Span dx, Span dmemory, CSpan dy, CSpan x, CSpan memory, const AttentionMask& self_mask,
                            const AttentionMask& memory_mask, int B, int T, int S, const Dropout& drop) {
  const int rows = B * T;
  ffn_res_.backward(dx2_, dy, x2_, rows, drop,
                    [&](Span din, CSpan dout, CSpan in) { ffn_.backward(din, dout, in, rows, drop); });
  cross_res_.backward(dx1_, dx2_, x1_, rows, drop, [&](Span din, CSpan dout, CSpan in) {
    cross_attn_.backward(din, dmemory, dout, in, memory, memory_mask, B, T, S, drop);
  });
  self_res_.backward(dx, dx1_, x, rows, drop, [&](Span din, CSpan dout, CSpan in) {
    self_attn_.backward(din, din, dout, in, in, self_mask, B, T, T, drop);
  });
}

}  // namespace qkv::nn
