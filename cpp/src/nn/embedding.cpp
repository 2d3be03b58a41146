#include "nn/embedding.h"

#include "kernels/kernels.h"

namespace qkv::nn {

Embedding::Embedding(Parameters& params, int V, int T_max, int C, float init_std)
    : C_(C),
      wte_(params.add("tok_emb.weight", {V, C}, Init::Normal, init_std)),
      wpe_(params.add("pos_emb.weight", {T_max, C}, Init::Normal, init_std)) {}

void Embedding::forward(Span x, const int32_t* tokens, int B, int T) const {
  kernels::embedding_forward(x, tokens, wte_.value, wpe_.value, B, T, C_);
}

void Embedding::backward(CSpan dx, const int32_t* tokens, int B, int T) {
  kernels::embedding_backward(wte_.grad, wpe_.grad, dx, tokens, B, T, C_);
}

}  // namespace qkv::nn
