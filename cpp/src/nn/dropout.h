#pragma once
// What a forward pass says about dropout: the rate (0 in eval mode) and the pass's seed. Each module that
// drops something owns a stream number (Parameters::new_stream), so the masks of different modules and
// different steps are independent yet reproducible, and a backward recomputes its forward's masks.
#include <cstdint>

#include "ops/dropout_hash.h"

namespace qkv::nn {

struct Dropout {
  float p = 0.f;
  uint64_t seed = 0;
  // A training pass (training mode, a training call): LoRA adapters drop their inputs at their own rate then,
  // whatever p (nn/lora.h).
  bool train = false;

  bool active() const { return p > 0.f; }
  // The seed of one module's masks in this pass.
  uint64_t seed_for(uint64_t stream) const {
    return (static_cast<uint64_t>(ops::dropout_hash(seed, stream)) << 32) ^ (seed + stream);
  }
};

}  // namespace qkv::nn
