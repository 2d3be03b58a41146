#pragma once
// A backend that forwards everything to another and counts the memory allocated through it: the bytes live now and
// the most ever live at once (peak), so a test can show what a load allocated, and that nothing larger was ever held
// (a float32 copy of weights kept in half precision). Every op is forwarded (ops/op_list.def's X-macro), so a new op
// needs nothing here. Install it with ops::set_cpu_backend_for_tests while models are built on it; it must outlive
// them (they free through it).
#include <algorithm>
#include <cstddef>
#include <map>
#include <string>

#include "ops/ops.h"

namespace qkv::ops {

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend& inner) : in_(inner) {}
  size_t live() const { return live_; }
  size_t peak() const { return peak_; }
  void reset_peak() { peak_ = live_; }

  Device device() const override { return in_.device(); }
  std::string name() const override { return "counting " + in_.name(); }
  void* allocate(size_t bytes) override {
    void* p = in_.allocate(bytes);
    if (p) sizes_[p] = bytes, live_ += bytes, peak_ = std::max(peak_, live_);
    return p;
  }
  void free(void* p) noexcept override {
    if (const auto it = sizes_.find(p); it != sizes_.end()) live_ -= it->second, sizes_.erase(it);
    in_.free(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override { in_.upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { in_.download(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { in_.copy(dst, src, bytes); }
  void synchronize(const char* op) override { in_.synchronize(op); }

#define QKV_OP(name, Code, opcode, group, scratch) \
  void name(QKV_PARAMS(QKV_ARGS_##name)) override { in_.name(QKV_NAMES(QKV_ARGS_##name)); }
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch) \
  type name(QKV_PARAMS(QKV_ARGS_##name)) override { return in_.name(QKV_NAMES(QKV_ARGS_##name)); }
#define QKV_SCRATCH(rule)                                                          \
  size_t rule##_scratch_size(QKV_PARAMS(QKV_SCRATCH_ARGS_##rule)) const override { \
    return in_.rule##_scratch_size(QKV_NAMES(QKV_SCRATCH_ARGS_##rule));            \
  }
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST

 private:
  Backend& in_;
  std::map<void*, size_t> sizes_;
  size_t live_ = 0, peak_ = 0;
};

}  // namespace qkv::ops
