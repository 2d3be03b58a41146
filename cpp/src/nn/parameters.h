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
//
// Quantized weights (quantize(), or a loader's ForLoading with the file's formats): a matrix stored in a packed
// format of ops/weight_format.h (rows of int8, 4-bit groups, f16 or bf16, with their scales) lives in a second
// flat buffer, packed(), and has no float32 value: the float32 buffer is laid out again without it, so resident
// memory falls by the format's ratio (4x int8, ~7x q4). Such a model is for inference only: it has no gradients
// or moments, and ensure_training() refuses it (qkv::Error naming the format and pointing to LoRA adapters).
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/weight_format.h"
#include "qkv/tensor.h"

namespace qkv::nn {

enum class Init { Normal, Zeros, Ones };

struct Param {
  std::string name;  // PyTorch-style, e.g. "layers.0.self_attn.in_proj_weight"
  std::vector<int64_t> shape;
  Init init = Init::Zeros;
  float init_std = 0.f;
  bool decay = false;  // weight decay applies (tensors with 2+ dimensions)
  // What Model::quantize may store packed: a Linear's weight (matrix) or the token embedding (embedding).
  bool matrix = false, embedding = false;
  // float32: the offset in values() (floats); packed: the byte offset of its rows in packed(), its scales after
  // them at the next 64-byte boundary.
  size_t offset = 0, numel = 0;
  Span value, grad, m, v;  // device memory; all empty when packed
  // Packed storage (format != F32): rows() rows of ops::row_stride(format, cols()) bytes, and
  // rows() * ops::scales_per_row(format, cols()) float32 scales (none for F16 / BF16). Device memory.
  ops::WeightFormat format = ops::WeightFormat::F32;
  std::span<uint8_t> packed;
  Span scales;
  // The products with this packed (int8 or q4) matrix may quantize their activations to int8 and take integer dot
  // products (ops/op_list.def gemm_quant's int8_act; QuantizeOptions::activations).
  bool int8_act = false;

  bool is_packed() const { return format != ops::WeightFormat::F32; }
  int rows() const { return shape.empty() ? 1 : static_cast<int>(shape[0]); }
  int cols() const { return rows() > 0 ? static_cast<int>(numel / static_cast<size_t>(rows())) : 0; }
};

struct LoraAdapter;  // nn/lora.h

// Where a LoRA adapter may sit (nn/lora.h): registered by a layer with its model's Parameters while it is built,
// in registration order; Model::add_lora points `adapter` at the adapter it makes (nullptr: none).
//   stem    the adapter's name stem, e.g. "layers.0.self_attn.in_proj_q" (its tensors: stem + ".lora_A.weight")
//   target  the qkv/lora.h target it answers to ("q", "k", "v", "qkv", "out", "up", "down", "head")
//   in, out the adapter's input and output widths: A (rank, in), B (out, rank)
//   weight  the base weight the adapter's product adds to: rows [row0, row0 + out) of it (merge_lora folds there)
struct LoraSite {
  std::string stem, target;
  int in = 0, out = 0;
  Param* weight = nullptr;
  int row0 = 0;
  LoraAdapter* adapter = nullptr;
};

// The formats a loader asks for, by parameter name (absent: float32).
using Formats = std::map<std::string, ops::WeightFormat>;

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
  // `formats`: the tensors finalize() lays out packed from the start (a quantized checkpoint's, so that its float32
  // values are never allocated); the map must outlive the model's construction.
  // ShapesOnly: finalize() allocates nothing and every span stays empty, for a loader that reads the parameters'
  // names, shapes and kinds (matrix, embedding) before it decides their formats (a Hub file's half-precision
  // matrices kept packed: io/pretrained_loader.cpp); such a model is good for nothing else.
  struct ShapesOnly {};
  class ForLoading {
   public:
    explicit ForLoading(const Formats* formats = nullptr)
        : was_(loading_), was_shapes_(shapes_only_), was_formats_(loading_formats_) {
      loading_ = true;
      shapes_only_ = false;
      loading_formats_ = formats;
    }
    explicit ForLoading(ShapesOnly) : ForLoading() { shapes_only_ = true; }
    ~ForLoading() {
      loading_ = was_;
      shapes_only_ = was_shapes_;
      loading_formats_ = was_formats_;
    }
    ForLoading(const ForLoading&) = delete;
    ForLoading& operator=(const ForLoading&) = delete;

   private:
    bool was_, was_shapes_;
    const Formats* was_formats_;
  };

  Param& add(std::string name, std::vector<int64_t> shape, Init init, float init_std = 0.f);
  Constant& add_constant(std::vector<float> host_values);
  // Allocates value/grad/m/v on the backend's device and draws Normal inits from Rng(seed) in registration order
  // (on the host, then uploaded: the same values on every device).
  void finalize(uint64_t seed);
  // Allocates the gradients (zero) and the Adam moments (zero) where finalize() left them out (ForLoading); a
  // no-op once they exist. Every call that reads or writes them calls it first (models/model_core.h).
  void ensure_training();
  bool has_training() const { return grads_.numel() == total_ && packed_count_ == 0 && !frozen_; }

  // Stores each (parameter, format) of `which` packed (format != F32), quantized on the host from its float32 values
  // (ops::quantize_rows), and lays the float32 buffer out again without them; gradients and moments are released.
  // Each must be a 2-D float32 parameter of this model (qkv::Error naming it otherwise). Everything new is built
  // before anything is swapped in: on any error the parameters are unchanged.
  void quantize(const std::vector<std::pair<Param*, ops::WeightFormat>>& which);
  // How many parameters are packed, and the formats by name (what a checkpoint records).
  size_t packed_count() const { return packed_count_; }
  // The int8 and q4 matrices' products may quantize their activations (Param::int8_act): every such matrix now and
  // every one quantize() makes later. Off after finalize().
  void set_int8_act(bool on);
  bool int8_act() const { return int8_act_; }
  Formats formats() const;
  // Bytes of weights held on the device: the float32 buffer and the packed one.
  size_t weight_bytes() const { return values_.numel() * sizeof(float) + packed_.numel() * sizeof(float); }
  void zero_grad();
  // LoRA (nn/lora.h). A layer registers the sites of its adapters; a frozen base (adapters train, models/lora_set.h)
  // has no gradients or moments and its layers' backwards compute only dx (no dW, db, LayerNorm or embedding
  // gradients).
  LoraSite& add_lora_site(std::string stem, std::string target, int in, int out, Param& weight, int row0 = 0) {
    lora_sites_.push_back({std::move(stem), std::move(target), in, out, &weight, row0, nullptr});
    return lora_sites_.back();
  }
  std::deque<LoraSite>& lora_sites() { return lora_sites_; }
  bool frozen() const { return frozen_; }
  // Freezing releases the gradients and moments (and leaves ZeRO-1's sharding); unfreezing leaves them to
  // ensure_training(), zero.
  void set_frozen(bool frozen);

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
  // Gives each Param its offset for `formats` (one per Param; F32: in the float32 buffer) and returns the float32
  // floats and the packed bytes the layout needs; touches nothing else.
  std::pair<size_t, size_t> layout(const std::vector<ops::WeightFormat>& formats, std::vector<size_t>& offsets) const;

  ops::Backend* ops_;
  std::deque<Param> params_;  // a deque keeps references stable while layers register
  std::deque<Constant> constants_;
  std::deque<LoraSite> lora_sites_;
  bool frozen_ = false;
  size_t total_ = 0, m_begin_ = 0, packed_count_ = 0;
  uint64_t streams_ = 0;
  Tensor values_, grads_, m_, v_, constants_buf_;
  Tensor packed_;  // the packed parameters' rows and scales (bytes, held as floats for 64-byte alignment)
  std::function<void(size_t)> grads_final_;
  static thread_local bool loading_, shapes_only_;
  static thread_local const Formats* loading_formats_;
  bool int8_act_ = false;
};

}  // namespace qkv::nn
