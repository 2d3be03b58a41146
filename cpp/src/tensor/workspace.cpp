#include "qkv/workspace.h"

#include <cstring>

#include "qkv/error.h"

namespace qkv {

void Workspace::plan(const std::function<void(Workspace&)>& fn) {
  planning_ = true;
  counting_ = true;
  offset_ = 0;
  fn(*this);
  const size_t needed = offset_;
  if (needed > capacity_) {
    buffer_.reset();
    buffer_ = allocate_floats(needed);
    capacity_ = needed;
  } else if (needed > 0) {
    std::memset(buffer_.get(), 0, needed * sizeof(float));
  }
  counting_ = false;
  offset_ = 0;
  fn(*this);
  planning_ = false;
}

Span Workspace::take(size_t n) {
  check(planning_, "Workspace::take called outside Workspace::plan");
  const size_t start = offset_;
  offset_ += (n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
  if (counting_) return {};
  return {buffer_.get() + start, n};
}

}  // namespace qkv
