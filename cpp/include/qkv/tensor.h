#pragma once
// Tensor: a shape, an owned 64-byte-aligned float32 buffer, and the device it lives on.
// Kernels never see Tensors: they take spans (Span / CSpan) and sizes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qkv {

using Span = std::span<float>;
using CSpan = std::span<const float>;

enum class Device { CPU, CUDA };

struct AlignedDeleter {
  void operator()(float* p) const noexcept;
};
using AlignedFloats = std::unique_ptr<float[], AlignedDeleter>;

// Allocates `count` floats aligned to 64 bytes, zero-filled. Throws qkv::Error when memory runs out.
AlignedFloats allocate_floats(size_t count);

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
