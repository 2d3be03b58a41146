#include "qkv/workspace.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/ops.h"
#include "qkv/error.h"

namespace qkv {

void Workspace::set_device(Device device) {
  if (device == device_) return;
  buffer_.reset();
  capacity_ = 0;
  device_ = device;
}

void Workspace::plan(const std::function<void(Workspace&)>& fn) {
  planning_ = true;
  counting_ = true;
  offset_ = 0;
  shared_.clear();
  fn(*this);
  for (Shared& s : shared_) {
    s.offset = offset_;
    offset_ += s.floats;
  }
  const size_t needed = offset_;
  // A smaller plan than the block is one made again after a reset (the models' capacities only grow otherwise:
  // adapters added, recomputation switched on): the block shrinks to it.
  if (needed != capacity_) {
    buffer_.reset();
    if (needed > 0) buffer_ = allocate_floats(needed, device_);
    capacity_ = needed;
  } else if (needed > 0) {
    ops::backend(device_).fill({buffer_.get(), needed}, 0.f);
  }
  counting_ = false;
  offset_ = 0;
  fn(*this);
  planning_ = false;
}

Span Workspace::take(size_t n) {
  check(planning_, "Workspace::take called outside Workspace::plan");
  const size_t start = offset_;
  // Checked: on wasm32 (32-bit size_t) a batch far too large would otherwise wrap to a small arena.
  check(n <= std::numeric_limits<size_t>::max() / sizeof(float) - 16 - offset_,
        "out of memory: the activations of this batch do not fit in this build's address space");
  offset_ += (n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
  if (counting_) return {};
  return {buffer_.get() + start, n};
}

std::span<int32_t> Workspace::take_ints(size_t n) {
  static_assert(sizeof(int32_t) == sizeof(float));
  const Span s = take(n);
  return {reinterpret_cast<int32_t*>(s.data()), s.size()};
}

std::span<uint8_t> Workspace::take_bytes(size_t n) {
  const Span s = take((n + sizeof(float) - 1) / sizeof(float));
  return {reinterpret_cast<uint8_t*>(s.data()), s.empty() ? 0 : n};
}

Span Workspace::take_shared(std::string_view key, size_t n) {
  check(planning_, "Workspace::take_shared called outside Workspace::plan");
  const size_t rounded = (n + 15) / 16 * 16;
  auto it = shared_.begin();
  while (it != shared_.end() && it->key != key) ++it;
  if (counting_) {
    if (it == shared_.end()) {
      shared_.push_back({std::string(key), rounded, 0});
    } else {
      it->floats = std::max(it->floats, rounded);
    }
    return {};
  }
  check(it != shared_.end() && n <= it->floats, "Workspace::take_shared(\"", key,
        "\"): the plan asked for more than its counting pass did");
  return {buffer_.get() + it->offset, n};
}

}  // namespace qkv
