#include "nn/stack.h"

#include <algorithm>

namespace qkv::nn {
namespace {

// The final norm's backward into d_a, or a copy when there is no norm.
void final_norm_backward(ops::Backend& ops, LayerNorm* norm, Span d_a, CSpan d_output, CSpan top, int rows, int C) {
  if (norm) {
    norm->backward(d_a, {}, d_output, top, rows);
  } else {
    ops.copy_rows(d_a.data(), C, d_output.data(), C, rows, C);
  }
}

// With a final norm, d_a (where its backward writes d top) is `out`, the norm's output: the head has read it by then
// (the models run their heads before the stack's backward), and the norm's backward reads its input, not its output.
void plan_buffers(Workspace& ws, std::vector<Span>& xs, Span& out, Span& d_a, Span& d_b, size_t layers, size_t n,
                  bool final_norm) {
  xs.assign(layers + 1, Span{});
  for (auto& x : xs) x = ws.take(n);
  out = ws.take(n);
  d_a = final_norm ? out : ws.take(n);
  d_b = ws.take(n);
}

// Pre-LN: where layer l's output is normalised next, fused with the add that makes it: layer l+1's input
// norm, or the stack's final norm into `out` (none: a plain add). Post-LN: nowhere (each layer ends in its norm).
template <class Layers>
NormInto next_norm(const Layers& layers, size_t l, LayerNorm* final_norm, Span out, bool pre) {
  if (!pre) return {};
  if (l + 1 < layers.size()) return layers[l + 1]->input_norm();
  return {final_norm, out};
}

}  // namespace

EncoderStack::EncoderStack(Parameters& params, const std::string& prefix, int layers, const LayerOptions& o,
                           bool final_norm, const std::string& norm_name)
    : params_(params), C_(o.C), pre_(o.norm == NormPosition::Pre), key_("saved:" + prefix + "layer.") {
  for (int l = 0; l < layers; ++l) {
    offsets_.push_back(params.count());
    layers_.push_back(std::make_unique<EncoderLayer>(params, prefix + "layers." + std::to_string(l) + ".", o));
  }
  offsets_.push_back(params.count());
  if (final_norm) norm_ = std::make_unique<LayerNorm>(params, norm_name, o.C);
}

void EncoderStack::plan(Workspace& ws, int B, int T, bool recompute, int cached_keys) {
  recompute_ = recompute;
  held_ = -1;
  last_full_ = false;
  const Saved saved = recompute ? Saved{key_} : Saved{};
  for (auto& l : layers_) l->plan(ws, B, T, saved, cached_keys);
  if (norm_) norm_->plan(ws, B * T);
  plan_buffers(ws, xs_, out_, d_a_, d_b_, layers_.size(), static_cast<size_t>(B) * T * C_, norm_ != nullptr);
}

void EncoderStack::forward_layer(size_t l, const AttentionMask& mask, int B, int T, const Dropout& drop,
                                 KvCache* cache) {
  // Recomputing, only the final norm is fused into a layer's last add (the stack's own buffer): a layer's input norm
  // lives in the shared buffers (header).
  const bool fuse = !recompute_ || l + 1 == layers_.size();
  layers_[l]->forward(xs_[l + 1], xs_[l], mask, B, T, drop, pre_ && l > 0 && !recompute_,
                      fuse ? next_norm(layers_, l, norm_.get(), out_, pre_) : NormInto{}, cache);
  held_ = static_cast<int>(l);
}

void EncoderStack::forward(const AttentionMask& mask, int B, int T, const Dropout& drop, std::span<KvCache> caches) {
  for (size_t l = 0; l < layers_.size(); ++l) forward_layer(l, mask, B, T, drop, caches.empty() ? nullptr : &caches[l]);
  if (norm_ && (!pre_ || layers_.empty())) norm_->forward(out_, xs_.back(), B * T);
  last_mask_ = mask;
  last_drop_ = drop;
  last_B_ = B;
  last_T_ = T;
  last_full_ = caches.empty();
}

std::vector<float> EncoderStack::attention_weights(int l) {
  const size_t i = static_cast<size_t>(l);
  if (recompute_ && held_ != l) {
    if (!last_full_) return {};
    // Re-running layer l writes what its first run wrote: its output and, pre-LN, the next norm's (the same values).
    forward_layer(i, last_mask_, last_B_, last_T_, last_drop_, nullptr);
  }
  return layers_[i]->self_attention().weights();
}

Span EncoderStack::backward(CSpan d_output, const AttentionMask& mask, int B, int T, const Dropout& drop) {
  final_norm_backward(params_.ops(), norm_.get(), d_a_, d_output, xs_.back(), B * T, C_);
  params_.grads_final_from(offsets_.back());
  Span d_out = d_a_, d_in = d_b_;
  for (int l = size() - 1; l >= 0; --l) {
    // Recomputing: layer l's internals, as its forward made them, back in the shared buffers (its output and the
    // next norm's are rewritten with the values they hold).
    if (recompute_ && held_ != l) forward_layer(static_cast<size_t>(l), mask, B, T, drop, nullptr);
    layers_[static_cast<size_t>(l)]->backward(d_in, d_out, xs_[static_cast<size_t>(l)], mask, B, T, drop);
    params_.grads_final_from(offsets_[static_cast<size_t>(l)]);
    std::swap(d_in, d_out);
  }
  // A backward is a training pass: the weights change after it, so re-running a layer would no longer give the last
  // forward's attention weights. Recomputing, none are kept (attention_weights: empty until the next forward).
  if (recompute_) {
    last_full_ = false;
    held_ = -1;
  }
  return d_out;
}

DecoderStack::DecoderStack(Parameters& params, const std::string& prefix, int layers, const LayerOptions& o,
                           bool final_norm, const std::string& norm_name)
    : params_(params), C_(o.C), pre_(o.norm == NormPosition::Pre) {
  for (int l = 0; l < layers; ++l) {
    offsets_.push_back(params.count());
    layers_.push_back(std::make_unique<DecoderLayer>(params, prefix + "layers." + std::to_string(l) + ".", o));
  }
  offsets_.push_back(params.count());
  if (final_norm) norm_ = std::make_unique<LayerNorm>(params, norm_name, o.C);
}

void DecoderStack::plan(Workspace& ws, int B, int T, int S) {
  for (auto& l : layers_) l->plan(ws, B, T, S);
  if (norm_) norm_->plan(ws, B * T);
  plan_buffers(ws, xs_, out_, d_a_, d_b_, layers_.size(), static_cast<size_t>(B) * T * C_, norm_ != nullptr);
}

void DecoderStack::forward(CSpan memory, const AttentionMask& self_mask, const AttentionMask& memory_mask, int B, int T,
                           int S, const Dropout& drop, std::span<KvCache> self_caches,
                           std::span<KvCache> cross_caches) {
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward(xs_[l + 1], xs_[l], memory, self_mask, memory_mask, B, T, S, drop, pre_ && l > 0,
                        next_norm(layers_, l, norm_.get(), out_, pre_), self_caches.empty() ? nullptr : &self_caches[l],
                        cross_caches.empty() ? nullptr : &cross_caches[l]);
  if (norm_ && (!pre_ || layers_.empty())) norm_->forward(out_, xs_.back(), B * T);
}

Span DecoderStack::backward(CSpan d_output, Span dmemory, CSpan memory, const AttentionMask& self_mask,
                            const AttentionMask& memory_mask, int B, int T, int S, const Dropout& drop) {
  final_norm_backward(params_.ops(), norm_.get(), d_a_, d_output, xs_.back(), B * T, C_);
  params_.grads_final_from(offsets_.back());
  Span d_out = d_a_, d_in = d_b_;
  for (int l = size() - 1; l >= 0; --l) {
    layers_[static_cast<size_t>(l)]->backward(d_in, dmemory, d_out, xs_[static_cast<size_t>(l)], memory, self_mask,
                                              memory_mask, B, T, S, drop);
    params_.grads_final_from(offsets_[static_cast<size_t>(l)]);
    std::swap(d_in, d_out);
  }
  return d_out;
}

}  // namespace qkv::nn
