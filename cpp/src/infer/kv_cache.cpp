#include "infer/kv_cache.h"

#include <algorithm>

#include "qkv/error.h"

namespace qkv::infer {

void KvCaches::reset(int L, int R, int T, int C, bool fixed) {
  R_ = R;
  T_ = T;
  C_ = C;
  const size_t per_layer = static_cast<size_t>(R) * T * 2 * C;
  store_.resize(per_layer * L);  // grows once to the largest size asked for; never shrinks
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
  // Only the filled positions move: length rows of 2C floats per row of the batch.
  const size_t row = static_cast<size_t>(T_) * 2 * C_, used = static_cast<size_t>(length()) * 2 * C_;
  // One layer's worth of scratch, sized once for the whole capacity (no allocation per decoding step).
  if (scratch_.size() < static_cast<size_t>(R_) * row) scratch_.resize(static_cast<size_t>(R_) * row);
  for (nn::KvCache& c : layers_) {
    for (int r = 0; r < R_; ++r) std::copy_n(c.kv + parents[r] * row, used, scratch_.data() + r * used);
    for (int r = 0; r < R_; ++r) std::copy_n(scratch_.data() + r * used, used, c.kv + r * row);
  }
}

}  // namespace qkv::infer
