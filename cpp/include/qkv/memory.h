#pragma once
// What a model holds in memory, in bytes. Everything is allocated up front: the parameters with their
// gradients and Adam moments when the model is built (a model made by load() or load_file() holds only its
// weights until it first trains or its optimizer state is saved: gradients and optimizer read 0 until then), the
// activations when a shape is first planned (the workspace arena, sized for the largest batch x sequence seen so far).
// The training loop itself allocates nothing, so these figures are the model's whole footprint besides the matrix
// product's per-thread packing buffers (at most (M + N) x K floats of the largest product).
#include <cstddef>

namespace qkv {

struct MemoryUsage {
  size_t parameters = 0;   // weights: float32, and packed ones with their scales (Model::quantize)
  size_t gradients = 0;    // one gradient per weight
  size_t optimizer = 0;    // Adam's two moments per weight
  size_t activations = 0;  // the workspace arena: activations saved for the backward, and scratch
  size_t total() const { return parameters + gradients + optimizer + activations; }
};

}  // namespace qkv
