#pragma once
// A model's tensor as tests, tools and checkpoints see it: its (PyTorch-style) name, shape, values,
// gradient and Adam moments. The spans point into the model; they stay valid while the model lives.
#include <cstdint>
#include <span>
#include <vector>

namespace qkv {

// grad, m and v are empty for a model made by load() or load_file() that has not trained yet: it has none
// (qkv/memory.h).
struct ParameterView {
  const char* name;
  std::span<const int64_t> shape;
  std::span<float> value;
  std::span<float> grad;
  std::span<float> m, v;  // Adam's first and second moments
};

}  // namespace qkv
