#pragma once
// What the LoRA tests share (models/lora_test, io/lora_files_test, io/lora_checkpoint_test): options spelled in one
// call, and adapters given random values (a fresh B is 0, which would hide a swapped, dropped or unread tensor and
// make every dA zero).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "qkv/lora.h"
#include "qkv/model.h"
#include "test_util.h"

namespace qkv::test {

inline LoraOptions lora_options(std::vector<std::string> targets, int rank, float alpha, float dropout, uint64_t seed) {
  LoraOptions o;
  o.rank = rank;
  o.alpha = alpha;
  o.dropout = dropout;
  o.targets = std::move(targets);
  o.seed = seed;
  return o;
}

// Every adapter tensor drawn from N(0, scale), tensor i from seed + i.
inline void randomize_adapters(Model& m, uint64_t seed, float scale) {
  for (const ParameterView& p : m.lora_parameters()) {
    const auto r = randn(p.value.size(), seed++, scale);
    std::copy(r.begin(), r.end(), p.value.begin());
  }
}

}  // namespace qkv::test
