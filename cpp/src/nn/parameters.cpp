#include "nn/parameters.h"

#include <algorithm>
#include <limits>

#include "qkv/error.h"
#include "runtime/random.h"

namespace qkv::nn {

thread_local bool Parameters::loading_ = false;

Param& Parameters::add(std::string name, std::vector<int64_t> shape, Init init, float init_std) {
  check(values_.numel() == 0, "Parameters::add(", name, ") after finalize()");
  Param p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.init = init;
  p.init_std = init_std;
  p.decay = p.shape.size() >= 2;
  // Checked: on wasm32 (32-bit size_t) a model far too large would otherwise wrap to a small size.
  constexpr size_t kMax = std::numeric_limits<size_t>::max() / sizeof(float) - 16;
  p.numel = 1;
  for (int64_t d : p.shape) {
    check(d >= 0 && (d == 0 || p.numel <= kMax / static_cast<uint64_t>(d)), "out of memory: parameter ", p.name,
          " is too large for this build's address space");
    p.numel *= static_cast<size_t>(d);
  }
  check(p.numel <= kMax - total_, "out of memory: the parameters reach ", p.name,
        " beyond this build's address space (a model this large cannot be held)");
  p.offset = total_;
  total_ += (p.numel + 15) / 16 * 16;  // 64-byte aligned tensors
  params_.push_back(std::move(p));
  return params_.back();
}

Constant& Parameters::add_constant(std::vector<float> host_values) {
  check(values_.numel() == 0, "Parameters::add_constant after finalize()");
  constants_.push_back({std::move(host_values), {}});
  return constants_.back();
}

void Parameters::bind() {
  const bool whole = has_training() && !moments_sharded();
  for (Param& p : params_) {
    p.value = {values_.data() + p.offset, p.numel};
    p.grad = has_training() ? Span{grads_.data() + p.offset, p.numel} : Span{};
    p.m = whole ? Span{m_.data() + p.offset, p.numel} : Span{};
    p.v = whole ? Span{v_.data() + p.offset, p.numel} : Span{};
  }
  size_t at = 0;
  for (Constant& c : constants_) {
    c.value = {constants_buf_.data() + at, c.host.size()};
    at += (c.host.size() + 15) / 16 * 16;
  }
}

void Parameters::finalize(uint64_t seed) {
  const std::vector<int64_t> shape{static_cast<int64_t>(total_)};
  const Device d = device();
  values_ = Tensor(shape, d);
  size_t constant_floats = 0;
  for (const Constant& c : constants_) constant_floats += (c.host.size() + 15) / 16 * 16;
  constants_buf_ = Tensor({static_cast<int64_t>(constant_floats)}, d);
  if (loading_) {
    bind();
    for (Constant& c : constants_) ops_->upload(c.value.data(), c.host.data(), c.host.size() * sizeof(float));
    return;
  }
  grads_ = Tensor(shape, d);
  m_ = Tensor(shape, d);
  v_ = Tensor(shape, d);
  bind();
  // The initial values are drawn on the host, in registration order, and uploaded once.
  std::vector<float> init(total_, 0.f);
  Rng rng(seed);
  for (const Param& p : params_) {
    float* x = init.data() + p.offset;
    switch (p.init) {
      case Init::Zeros: break;
      case Init::Ones: std::fill_n(x, p.numel, 1.f); break;
      case Init::Normal:
        for (size_t i = 0; i < p.numel; ++i) x[i] = static_cast<float>(rng.normal() * p.init_std);
        break;
    }
  }
  ops_->upload(values_.data(), init.data(), total_ * sizeof(float));
  for (Constant& c : constants_) ops_->upload(c.value.data(), c.host.data(), c.host.size() * sizeof(float));
}

void Parameters::ensure_training() {
  if (has_training() || values_.numel() == 0) return;
  const std::vector<int64_t> shape{static_cast<int64_t>(total_)};
  // Built whole before any is kept: out of memory leaves the model as it was (weights only).
  Tensor g(shape, device()), m(shape, device()), v(shape, device());
  grads_ = std::move(g);
  m_ = std::move(m);
  v_ = std::move(v);
  m_begin_ = 0;
  bind();
}

void Parameters::zero_grad() {
  ensure_training();
  ops_->fill(grads_.span(), 0.f);
}

void Parameters::shard_moments(size_t begin, size_t end) {
  ensure_training();
  check(begin < end && end <= total_, "shard_moments(", begin, ", ", end, "): expected 0 <= begin < end <= ", total_);
  const std::vector<int64_t> shape{static_cast<int64_t>(end - begin)};
  Tensor m(shape, device()), v(shape, device());
  const size_t old_end = m_begin_ + m_.numel(), from = std::max(begin, m_begin_), until = std::min(end, old_end);
  if (from < until) {
    ops_->copy(m.data() + (from - begin), m_.data() + (from - m_begin_), (until - from) * sizeof(float));
    ops_->copy(v.data() + (from - begin), v_.data() + (from - m_begin_), (until - from) * sizeof(float));
  }
  m_ = std::move(m);
  v_ = std::move(v);
  m_begin_ = begin;
  bind();
}

void Parameters::to(ops::Backend& target) {
  if (&target == ops_) return;
  // Everything is copied to the new device first, through the host, and only then swapped in: a failure (out of
  // GPU memory) leaves the model whole where it was.
  Tensor* const buffers[] = {&values_, &grads_, &m_, &v_, &constants_buf_};
  std::vector<Tensor> moved;
  std::vector<float> host;
  for (Tensor* t : buffers) {
    if (t->numel() == 0) {  // gradients and moments not made yet (ForLoading): made on the new device when needed
      moved.emplace_back();
      continue;
    }
    host.resize(t->numel());
    ops_->download(host.data(), t->data(), host.size() * sizeof(float));
    moved.emplace_back(t->shape(), target.device());
    target.upload(moved.back().data(), host.data(), host.size() * sizeof(float));
  }
  for (size_t i = 0; i < moved.size(); ++i) *buffers[i] = std::move(moved[i]);
  ops_ = &target;
  bind();
}

}  // namespace qkv::nn
