#include "nn/embedding.h"

#include <cmath>

#include "kernels/kernels.h"

namespace qkv::nn {

Embedding::Embedding(Parameters& params, const std::string& token_name, const std::string& position_name, int V,
                     int T_max, int C, bool scale, Positions positions, float init_std)
    : C_(C),
      scale_(scale ? std::sqrt(static_cast<float>(C)) : 1.f),
      stream_(params.new_stream()),
      wte_(params.add(token_name, {V, C}, Init::Normal, init_std)),
      wpe_(positions == Positions::Learned ? &params.add(position_name, {T_max, C}, Init::Normal, init_std) : nullptr) {
  if (!wpe_) {
    table_ = Tensor({T_max, C});
    kernels::sinusoidal_positions(table_.span(), T_max, C);
  }
}

void Embedding::forward(Span x, const int32_t* tokens, int B, int T, const Dropout& drop, int pos0) const {
  const CSpan pos = (wpe_ ? CSpan(wpe_->value) : CSpan(table_.span())).subspan(static_cast<size_t>(pos0) * C_);
  kernels::embedding_forward(x, tokens, wte_.value, pos, scale_, B, T, C_);
  const size_t n = static_cast<size_t>(B) * T * C_;
  if (drop.active()) kernels::dropout_forward(x.first(n), x.first(n), drop.p, drop.seed_for(stream_));
}

void Embedding::backward(Span dx, const int32_t* tokens, int B, int T, const Dropout& drop) {
  const size_t n = static_cast<size_t>(B) * T * C_;
  if (drop.active()) kernels::dropout_backward(dx.first(n), dx.first(n), drop.p, drop.seed_for(stream_));
  kernels::embedding_backward(wte_.grad, wpe_ ? wpe_->grad : Span{}, dx, tokens, scale_, B, T, C_);
}

}  // namespace qkv::nn
