#pragma once
// A model's tensor as tests, tools and checkpoints see it: its (PyTorch-style) name, shape, values,
// gradient and Adam moments. The spans point into the model: they stay valid while its tensors do, until a call that
// rebuilds them: quantize() (the packed matrices replace the float32 values), remove_lora() and merge_lora() (the
// adapters' spans), to() another device. Take the views again after those.
#include <cstdint>
#include <span>
#include <vector>

namespace qkv {

// grad, m and v are empty for a model that has not trained yet and was made by load() or load_file() of a checkpoint
// saved without its optimizer state (save(false)): it has none (qkv/memory.h). A checkpoint saved with it (the
// default) brings its gradients and moments, so that training continues exactly.
struct ParameterView {
  const char* name;
  std::span<const int64_t> shape;
  std::span<float> value;
  std::span<float> grad;
  std::span<float> m, v;  // Adam's first and second moments
};

}  // namespace qkv
