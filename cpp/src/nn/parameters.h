#pragma once
// Parameters: every weight of a model in one flat buffer, with its gradient and AdamW moments in three
// more of the same layout (llm.c's organisation). Layers register their tensors by name while they are
// built, then finalize() allocates and initialises everything; a Param's spans are valid after that.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

enum class Init { Normal, Zeros, Ones };

struct Param {
  std::string name;  // PyTorch-style, e.g. "layers.0.self_attn.in_proj_weight"
  std::vector<int64_t> shape;
  Init init = Init::Zeros;
  float init_std = 0.f;
  bool decay = false;  // weight decay applies (tensors with 2+ dimensions)
  size_t offset = 0, numel = 0;
  Span value, grad, m, v;
};

class Parameters {
 public:
  Param& add(std::string name, std::vector<int64_t> shape, Init init, float init_std = 0.f);
  // Allocates value/grad/m/v and draws Normal inits from Rng(seed) in registration order.
  void finalize(uint64_t seed);
  void zero_grad();
  // A fresh dropout stream number for a module (see nn/dropout.h).
  uint64_t new_stream() { return ++streams_; }

  std::deque<Param>& all() { return params_; }
  size_t count() const { return total_; }
  // The flat buffers, every tensor at its offset (padding between tensors stays 0).
  Span values() { return values_.span(); }
  Span grads() { return grads_.span(); }
  Span moments1() { return m_.span(); }
  Span moments2() { return v_.span(); }

 private:
  std::deque<Param> params_;  // a deque keeps references stable while layers register
  size_t total_ = 0;
  uint64_t streams_ = 0;
  Tensor values_, grads_, m_, v_;
};

}  // namespace qkv::nn
