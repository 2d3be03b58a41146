#pragma once
// Parameters: every weight of a model in one flat buffer, with its gradient and AdamW moments in three
// more of the same layout (llm.c's organisation). Layers register their tensors by name while they are
// built, then finalize() allocates and initialises everything; a Param's spans are valid after that.
//
// The buffers live on the model's device, and so does everything a layer computes: Parameters holds the
// model's Backend (ops/ops.h), the one every layer calls. to() moves the buffers to another backend's device.
// Constants (the sinusoidal position table) are registered like parameters but are neither trained nor saved.
//
// Built to be loaded (ForLoading, in scope while a loader builds the model): finalize() draws no initial values
// (the checkpoint overwrites every one; drawing GPT-2 124M's takes seconds) and leaves the gradients and moments
// unallocated until a call needs them (ensure_training(): the first training step, a save with the optimizer
// state), so a model loaded to generate holds its weights and nothing else (3x less memory).
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "qkv/tensor.h"

namespace qkv::nn {

enum class Init { Normal, Zeros, Ones };

struct Param {
  std::string name;  // PyTorch-style, e.g. "layers.0.self_attn.in_proj_weight"
  std::vector<int64_t> shape;
  Init init = Init::Zeros;
  float init_std = 0.f;
  bool decay = false;  // weight decay applies (tensors with 2+ dimensions)
  size_t offset = 0, numel = 0;
  Span value, grad, m, v;  // device memory
};

// A fixed table computed on the host at construction (e.g. sinusoidal positions), kept on the device.
struct Constant {
  std::vector<float> host;
  Span value;  // device memory
};

class Parameters {
 public:
  explicit Parameters(ops::Backend& ops = ops::backend(Device::CPU)) : ops_(&ops) {}

  // While one is alive on this thread, models built finalize() as loaders need (above). Loaders only: every
  // parameter must then be written before the model is used.
  class ForLoading {
   public:
    ForLoading() : was_(loading_) { loading_ = true; }
    ~ForLoading() { loading_ = was_; }
    ForLoading(const ForLoading&) = delete;
    ForLoading& operator=(const ForLoading&) = delete;

   private:
    bool was_;
  };

  Param& add(std::string name, std::vector<int64_t> shape, Init init, float init_std = 0.f);
  Constant& add_constant(std::vector<float> host_values);
  // Allocates value/grad/m/v on the backend's device and draws Normal inits from Rng(seed) in registration order
  // (on the host, then uploaded: the same values on every device).
  void finalize(uint64_t seed);
  // Allocates the gradients (zero) and the Adam moments (zero) where finalize() left them out (ForLoading); a
  // no-op once they exist. Every call that reads or writes them calls it first (models/model_core.h).
  void ensure_training();
  bool has_training() const { return grads_.numel() == total_; }
  void zero_grad();
  // A fresh dropout stream number for a module (see nn/dropout.h).
  uint64_t new_stream() { return ++streams_; }

  // The backend every layer of the model calls.
  ops::Backend& ops() const { return *ops_; }
  Device device() const { return ops_->device(); }
  // Moves values, gradients, moments and constants to `ops`'s device (through the host) and makes it the
  // model's backend. Every span handed out before is invalid afterwards: the model re-plans its workspace.
  void to(ops::Backend& ops);

  std::deque<Param>& all() { return params_; }
  const std::deque<Param>& all() const { return params_; }
  size_t count() const { return total_; }
  // The flat buffers, every tensor at its offset (padding between tensors stays 0). Device memory.
  Span values() { return values_.span(); }
  Span grads() { return grads_.span(); }
  // The Adam moments: the whole layout, or under ZeRO-1 (shard_moments) only [moments_begin(), + size()) of it.
  Span moments1() { return m_.span(); }
  Span moments2() { return v_.span(); }
  size_t moments_begin() const { return m_begin_; }
  size_t moments_size() const { return m_.numel(); }
  bool moments_sharded() const { return has_training() && (m_begin_ != 0 || m_.numel() != total_); }
  // ZeRO-1 (parallel/): this replica keeps the moments of [begin, end) of the layout only, their values kept where
  // it held them (else 0); a Param's m and v are then empty. shard_moments(0, count()) makes them whole again.
  void shard_moments(size_t begin, size_t end);

  // Backward progress, for data-parallel training (parallel/): models register their tensors in forward order, so
  // a backward makes their gradients final from the last one back. The stacks call grads_final_from(offset)
  // after each layer's backward: every gradient at offsets >= `offset` of grads() is final for this backward
  // (nothing later in it adds to them). A listener may start reducing them at once.
  void on_grads_final(std::function<void(size_t offset)> listener) { grads_final_ = std::move(listener); }
  void grads_final_from(size_t offset) const {
    if (grads_final_) grads_final_(offset);
  }

 private:
  void bind();  // points every Param's and Constant's spans into the buffers

  ops::Backend* ops_;
  std::deque<Param> params_;  // a deque keeps references stable while layers register
  std::deque<Constant> constants_;
  size_t total_ = 0, m_begin_ = 0;
  uint64_t streams_ = 0;
  Tensor values_, grads_, m_, v_, constants_buf_;
  std::function<void(size_t)> grads_final_;
  static thread_local bool loading_;
};

}  // namespace qkv::nn
