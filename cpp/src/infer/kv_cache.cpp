#include "infer/kv_cache.h"

#include <algorithm>

#include "qkv/error.h"

namespace qkv::infer {

void KvCaches::reset(ops::Backend& ops, int L, int R, int T, int C, bool fixed) {
  R_ = R;
  T_ = T;
  C_ = C;
  const size_t per_layer = static_cast<size_t>(R) * T * 2 * C;
  // Grows once to the largest size asked for and never shrinks; a model moved to another device starts over.
  if (ops_ != &ops || store_.numel() < per_layer * L) {
    store_ = Tensor({static_cast<int64_t>(per_layer * L)}, ops.device());
    scratch_ = Tensor();
    ops_ = &ops;
  }
  layers_.assign(static_cast<size_t>(L), nn::KvCache{});
  for (int l = 0; l < L; ++l) layers_[static_cast<size_t>(l)] = {store_.data() + per_layer * l, T, 0, fixed};
}

void KvCaches::clear() {
  for (nn::KvCache& c : layers_) c.length = 0;
}

void KvCaches::reorder(std::span<const int32_t> parents) {
  check(parents.size() == static_cast<size_t>(R_), "KvCaches::reorder: ", parents.size(), " parents for ", R_, " rows");
  bool identity = true;
  for (int r = 0; r < R_; ++r) {
    check(parents[r] >= 0 && parents[r] < R_, "KvCaches::reorder: parents[", r, "] = ", parents[r],
          " is out of range [0, ", R_, ")");
    identity = identity && parents[r] == r;
  }
  if (identity || layers_.empty()) return;
  // Only the filled positions move: length rows of 2C floats per row of the batch, gathered into scratch and
  // copied back, so any permutation (a row taken by several, or by none) works.
  const int width = 2 * C_, used = length();
  const size_t row = static_cast<size_t>(T_) * width, used_floats = static_cast<size_t>(used) * width;
  // One layer's worth of scratch, sized once for the whole capacity (no allocation per decoding step).
  if (scratch_.numel() < static_cast<size_t>(R_) * row)
    scratch_ = Tensor({static_cast<int64_t>(static_cast<size_t>(R_) * row)}, ops_->device());
  float* scratch = scratch_.data();
  for (nn::KvCache& c : layers_) {
    for (int r = 0; r < R_; ++r)
      ops_->copy_rows(scratch + r * used_floats, width, c.kv + parents[r] * row, width, used, width);
    for (int r = 0; r < R_; ++r) ops_->copy_rows(c.kv + r * row, width, scratch + r * used_floats, width, used, width);
  }
}

}  // namespace qkv::infer
