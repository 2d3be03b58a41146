#pragma once
// Tensor: a shape, an owned float32 buffer (64-byte aligned, zero-filled), and the device it lives on.
// Kernels and ops never see Tensors: they take spans (Span / CSpan) and sizes. A span carries no device; the op
// contract (src/ops/ops.h) says every span an op gets is memory of that op's device, and a Tensor's spans are
// memory of its device(): host memory for Device::CPU, GPU memory for Device::CUDA (not readable on the host).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qkv {

using Span = std::span<float>;
using CSpan = std::span<const float>;

// WebGPU: the npm package's GPU worker (a browser page's GPU), connected by init({ backend: "webgpu" }).
enum class Device { CPU, CUDA, WebGPU };

// Returns memory to the backend of the device it came from.
struct AlignedDeleter {
  Device device = Device::CPU;
  void operator()(float* p) const noexcept;
};
using AlignedFloats = std::unique_ptr<float[], AlignedDeleter>;

// Allocates `count` floats on `device`, aligned to 64 bytes, zero-filled. Throws qkv::Error when memory runs
// out, or when the device is unavailable (naming why).
AlignedFloats allocate_floats(size_t count, Device device = Device::CPU);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, Device device = Device::CPU);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  size_t numel() const { return numel_; }
  Device device() const { return device_; }

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  Span span() { return {data_.get(), numel_}; }
  CSpan span() const { return {data_.get(), numel_}; }

  std::string shape_string() const;

 private:
  std::vector<int64_t> shape_;
  size_t numel_ = 0;
  Device device_ = Device::CPU;
  AlignedFloats data_;
};

}  // namespace qkv
