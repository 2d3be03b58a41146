#pragma once
// Token embedding (V, C) plus a learned position table (T_max, C).
#include <cstdint>

#include "nn/parameters.h"

namespace qkv::nn {

class Embedding {
 public:
  Embedding(Parameters& params, int V, int T_max, int C, float init_std);
  // tokens (B,T) -> x (B,T,C)
  void forward(Span x, const int32_t* tokens, int B, int T) const;
  void backward(CSpan dx, const int32_t* tokens, int B, int T);

  Param& token_weight() { return wte_; }

 private:
  int C_;
  Param& wte_;
  Param& wpe_;
};

}  // namespace qkv::nn
