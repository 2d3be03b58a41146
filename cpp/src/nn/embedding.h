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
  // The backward's scratch for batches of up to `rows` tokens (shared by every Embedding of the model).
  void plan(Workspace& ws, int rows);
  // tokens (B,T) at positions pos0 .. pos0 + T - 1 -> x (B,T,C). pos0 > 0: new tokens after a KV cache's.
  void forward(Span x, const ops::Ids& tokens, int B, int T, const Dropout& drop, int pos0 = 0) const;
  // dx is consumed (dropout's backward runs in place on it).
  void backward(Span dx, const ops::Ids& tokens, int B, int T, const Dropout& drop);

  Param& token_weight() { return wte_; }
  const Param& token_weight() const { return wte_; }
  float scale() const { return scale_; }

 private:
  ops::Backend& ops() const { return params_.ops(); }

  const Parameters& params_;
  int V_, C_;
  float scale_;
  uint64_t stream_;
  Param& wte_;
  Param* wpe_;                 // learned positions, or null
  Constant* table_ = nullptr;  // sinusoidal positions (T_max, C), or null
  Span scratch_;
};

}  // namespace qkv::nn
