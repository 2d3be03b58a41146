#include "nn/parameters.h"

#include <algorithm>
#include <limits>

#include "qkv/error.h"
#include "runtime/random.h"

namespace qkv::nn {

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

void Parameters::finalize(uint64_t seed) {
  const std::vector<int64_t> shape{static_cast<int64_t>(total_)};
  values_ = Tensor(shape);
  grads_ = Tensor(shape);
  m_ = Tensor(shape);
  v_ = Tensor(shape);
  Rng rng(seed);
  for (Param& p : params_) {
    p.value = {values_.data() + p.offset, p.numel};
    p.grad = {grads_.data() + p.offset, p.numel};
    p.m = {m_.data() + p.offset, p.numel};
    p.v = {v_.data() + p.offset, p.numel};
    switch (p.init) {
      case Init::Zeros: std::fill(p.value.begin(), p.value.end(), 0.f); break;
      case Init::Ones: std::fill(p.value.begin(), p.value.end(), 1.f); break;
      case Init::Normal:
        for (float& x : p.value) x = static_cast<float>(rng.normal() * p.init_std);
        break;
    }
  }
}

void Parameters::zero_grad() { std::fill(grads_.data(), grads_.data() + grads_.numel(), 0.f); }

}  // namespace qkv::nn
