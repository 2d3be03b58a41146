#pragma once
// Token embedding (V, C), optionally scaled by sqrt(C) as the paper does, plus positions: a learned table
// (T_max, C) or the fixed sinusoidal one; then dropout.
#include <cstdint>
#include <string>

#include "nn/dropout.h"
#include "nn/parameters.h"
#include "qkv/options.h"
#include "qkv/workspace.h"

namespace qkv::nn {

class Embedding {
 public:
  // token_name: e.g. "tok_emb.weight"; position_name: the learned table's name (unused for sinusoidal).
  Embedding(Parameters& params, const std::string& token_name, const std::string& position_name, int V, int T_max,
            int C, bool scale, Positions positions, float init_std);
  // tokens (B,T) at positions pos0 .. pos0 + T - 1 -> x (B,T,C). pos0 > 0: new tokens after a KV cache's.
  void forward(Span x, const int32_t* tokens, int B, int T, const Dropout& drop, int pos0 = 0) const;
  // dx is consumed (dropout's backward runs in place on it).
  void backward(Span dx, const int32_t* tokens, int B, int T, const Dropout& drop);

  Param& token_weight() { return wte_; }
  const Param& token_weight() const { return wte_; }
  float scale() const { return scale_; }

 private:
  int C_;
  float scale_;
  uint64_t stream_;
  Param& wte_;
  Param* wpe_;    // learned positions, or null
  Tensor table_;  // sinusoidal positions (T_max, C), or empty
};

}  // namespace qkv::nn
