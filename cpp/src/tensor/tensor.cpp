#include "qkv/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "ops/ops.h"
#include "qkv/error.h"

namespace qkv {

void AlignedDeleter::operator()(float* p) const noexcept {
  if (!p) return;
  if (device == Device::WebGPU)
    ops::webgpu_free(p);  // also once the GPU is gone: the registry would refuse the failed backend
  else
    ops::backend(device).free(p);
}

AlignedFloats allocate_floats(size_t count, Device device) {
  if (count == 0) return nullptr;
  // On wasm32 size_t is 32 bits: a model far too large would wrap the byte count to a small number and
  // the buffer would be overrun. Refuse it as the out-of-memory it is.
  check(count <= (std::numeric_limits<size_t>::max() - 63) / sizeof(float), "out of memory: ", count,
        " floats do not fit in this build's address space (", sizeof(size_t) * 8, "-bit)");
  return AlignedFloats(static_cast<float*>(ops::backend(device).allocate(count * sizeof(float))),
                       AlignedDeleter{device});
}

Tensor::Tensor(std::vector<int64_t> shape, Device device) : shape_(std::move(shape)), device_(device) {
  size_t n = 1;
  for (int64_t d : shape_) {
    check(d >= 0, "Tensor shape ", shape_string(), ": dimensions must be >= 0");
    check(d == 0 || n <= std::numeric_limits<size_t>::max() / static_cast<uint64_t>(d), "out of memory: Tensor shape ",
          shape_string(), " has more elements than this build's address space holds");
    n *= static_cast<size_t>(d);
  }
  numel_ = n;
  data_ = allocate_floats(n, device);
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + ")";
}

}  // namespace qkv
