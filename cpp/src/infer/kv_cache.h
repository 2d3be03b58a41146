#pragma once
// The KV caches of a model's decoder stack for generation: one nn::KvCache per attention layer over one
// buffer, sized once per (rows, capacity) and reused by later generations of the same size or smaller. The
// buffer lives on the model's device; reset() names the backend, and moves the buffer when that changed.
// Legend: L layers, R rows (batch, or batch x beams), T capacity in positions, C d_model.
#include <cstdint>
#include <span>
#include <vector>

#include "nn/attention.h"
#include "ops/ops.h"

namespace qkv::infer {

class KvCaches {
 public:
  // L caches of (R, T, 2C), empty (length 0). fixed: cross-attention caches (nn::KvCache::fixed).
  void reset(ops::Backend& ops, int L, int R, int T, int C, bool fixed = false);
  std::span<nn::KvCache> layers() { return layers_; }
  int length() const { return layers_.empty() ? 0 : layers_.front().length; }
  int capacity() const { return T_; }
  // Forget the kept positions (the buffers stay).
  void clear();
  // Beam search: row r takes over the positions of row parents[r] (R entries; a row may be taken by
  // several, or by none). Rows are copied through a scratch buffer, so any gather works.
  void reorder(std::span<const int32_t> parents);
  size_t bytes() const { return (store_.numel() + scratch_.numel()) * sizeof(float); }

 private:
  ops::Backend* ops_ = nullptr;
  Tensor store_, scratch_;
  std::vector<nn::KvCache> layers_;
  int R_ = 0, T_ = 0, C_ = 0;
};

}  // namespace qkv::infer
