#include "nn/embedding.h"

#include <cmath>

namespace qkv::nn {
Embedding::Embedding(Parameters& params, const std::string& token_name, const std::string& position_name, int V,
                     int T_max, int C, bool scale, Positions positions, float init_std)
    : params_(params),
      V_(V),
      C_(C),
      scale_(scale ? std::sqrt(static_cast<float>(C)) : 1.f),
      stream_(params.new_stream()),
      wte_(params.add(token_name, {V, C}, Init::Normal, init_std)),
      wpe_(positions == Positions::Learned ? &params.add(position_name, {T_max, C}, Init::Normal, init_std) : nullptr) {
  if (!wpe_) table_ = &params.add_constant(ops::sinusoidal_table(T_max, C));
  wte_.embedding = true;
}

void Embedding::plan(Workspace& ws, int rows) {
  scratch_ = ws.take_shared("embedding.scratch", ops().embedding_backward_scratch_size(V_, rows));
}

void Embedding::forward(Span x, const ops::Ids& tokens, int B, int T, const Dropout& drop, int pos0) const {
  const CSpan pos = (wpe_ ? CSpan(wpe_->value) : CSpan(table_->value)).subspan(static_cast<size_t>(pos0) * C_);
  const size_t n = static_cast<size_t>(B) * T * C_;
  if (wte_.is_packed()) {
    // A packed table (Model::quantize with the embedding): each token's row dequantized as it is gathered.
    ops().embedding_forward_quant(x.first(n), tokens, static_cast<int>(wte_.format), wte_.packed.data(),
                                  wte_.scales.empty() ? nullptr : wte_.scales.data(), pos, scale_, B, T, C_);
  } else {
    ops().embedding_forward(x.first(n), tokens, wte_.value, pos, scale_, B, T, C_);
  }
  if (drop.active()) ops().dropout_forward(x.first(n), x.first(n), drop.p, drop.seed_for(stream_));
}

void Embedding::backward(Span dx, const ops::Ids& tokens, int B, int T, const Dropout& drop) {
  const size_t n = static_cast<size_t>(B) * T * C_;
  if (params_.frozen()) return;  // a frozen base (LoRA): the tables get no gradient, and nothing is upstream
  if (drop.active()) ops().dropout_backward(dx.first(n), dx.first(n), drop.p, drop.seed_for(stream_));
  ops().embedding_backward(wte_.grad, wpe_ ? wpe_->grad : Span{}, dx.first(n), tokens, scale_, B, T, C_, scratch_);
}

}  // namespace qkv::nn
