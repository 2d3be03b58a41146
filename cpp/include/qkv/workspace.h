#pragma once
// Workspace: the arena that holds every activation and scratch buffer of a forward/backward pass.
//
// It is planned once per shape: plan(fn) runs fn twice, first counting what fn takes, then handing out
// real memory from one allocation. Layers keep the spans they took, so the training loop itself never
// allocates; a new (larger) shape means one new plan, and a plan that needs less than the block holds (a model
// planned again after a reset) gets a smaller block. The block lives on the workspace's device (the model's):
// host memory on the CPU, GPU memory under CUDA, where the spans are only for the ops to read.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/tensor.h"

namespace qkv {

class Workspace {
 public:
  // Moves the arena to another device: the block is freed, and the next plan() allocates there.
  void set_device(Device device);
  Device device() const { return device_; }

  // fn(*this) calls take() for every buffer it needs and stores the spans it gets.
  void plan(const std::function<void(Workspace&)>& fn);

  // A zero-filled span of n floats, aligned to 64 bytes. Only valid inside plan(); during the counting
  // pass it returns an empty span.
  Span take(size_t n);
  // The same, for token ids and for flags (padding masks), from the same block.
  std::span<int32_t> take_ints(size_t n);
  std::span<uint8_t> take_bytes(size_t n);

  // A zero-filled span of n floats that every take_shared() with the same key shares, sized for the largest
  // request. For scratch that lives only inside one call of one module (the gradients of a layer's
  // internals during its backward): modules run one at a time, so every layer of a model can use the same
  // memory, and the arena holds one layer's scratch instead of one per layer.
  Span take_shared(std::string_view key, size_t n);

  // Inside plan(): the floats take() has handed out so far in this pass (what the buffers taken before it hold,
  // take_shared()'s not counted), for a plan that sizes a buffer by what the others already hold.
  size_t taken_floats() const { return offset_; }

  size_t size_floats() const { return capacity_; }
  size_t size_bytes() const { return capacity_ * sizeof(float); }

 private:
  Device device_ = Device::CPU;
  AlignedFloats buffer_;
  size_t capacity_ = 0;
  size_t offset_ = 0;
  bool counting_ = false;
  bool planning_ = false;
  struct Shared {
    std::string key;
    size_t floats = 0, offset = 0;
  };
  std::vector<Shared> shared_;  // laid out after the take() buffers
};

}  // namespace qkv
