#pragma once
// Model: what LanguageModel, Seq2Seq and Classifier share — the device they live on, the optimizer's state and
// settings, gradient accumulation's zero and apply, the parameters, checkpoints. Each model adds its own
// training, evaluation and generation calls (their inputs differ) and its own static load().
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/lora.h"
#include "qkv/memory.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/parameter.h"
#include "qkv/quantize.h"
#include "qkv/step_loss.h"
#include "qkv/tensor.h"

namespace qkv {

namespace models {
struct ModelCore;
}
namespace dist {
class GradientSync;
}

template <class M>
class CheckpointLoader;
namespace io {
struct ModelAccess;  // cpp/src/io/model_access.h: the loaders that write a file into a model's parameters
}

class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The device the model lives and computes on: weights, gradients, Adam moments and activations are there.
  // to() moves them (through the host); the activations are planned again at the next call, and a paused
  // generation starts its KV cache over. Checkpoints are the same bytes whatever the device. On failure (no GPU:
  // the message gives cuda_unavailable_reason(); out of memory) nothing moves.
  Device device() const;
  void to(Device device);

  const OptimizerConfig& optimizer() const;
  void set_learning_rate(float lr);
  // Changes OptimizerConfig::non_finite from now on (e.g. to resume with Skip a run that stopped on a NaN).
  void set_non_finite(NonFinite policy);
  // Training mode (dropout on) is the default; eval mode turns dropout off everywhere.
  void set_training(bool training);
  // Activation recomputation ("gradient checkpointing"): each transformer layer of an encoder stack (the language
  // model's layers, the classifier's, seq2seq's encoder; not yet seq2seq's decoder) keeps only its input for the
  // backward, which re-runs the layer's forward first. The activation arena then holds one layer's activations
  // instead of every layer's (memory().activations falls; GPT-2 124M at batch 8 x 128: about 50 MiB a layer) for
  // one more forward of every layer but the last. Losses, gradients and parameters are bit for bit those without
  // it (the same ops in the same order, dropout's masks replayed). Recompute::Auto (the default) turns it on while
  // the model has LoRA adapters. Takes effect at the next call (the arena is planned again).
  void set_recompute(Recompute mode);
  Recompute recompute() const;
  size_t num_parameters() const;
  // Bytes held: weights, gradients, Adam moments, and the activation arena of the largest shape planned.
  MemoryUsage memory() const;
  // Training steps queued with queue_train_step (each model's) and not yet settled are settled first by the calls
  // below that read or change what they leave: step counts, gradients, parameters, checkpoints, moves, the
  // optimizer's settings (they wait for the GPU; an error a settled step throws comes out of them).
  int step() const;  // optimizer steps taken
  // Steps skipped under NonFinite::Skip (not counted in step(); saved in checkpoints with the optimizer
  // state), and whether the last optimizer step (train_step or apply_gradients) was one of them.
  int skipped_steps() const;
  bool last_step_skipped() const;

  // Gradient accumulation: zero_grad(), then each model's accumulate() adds weight * d(mean loss) per batch,
  // then apply_gradients() takes one optimizer step and returns true, or false when it was skipped under
  // NonFinite::Skip (a micro-batch's loss or the gradient norm was not finite). apply_gradients() with no
  // accumulate() (or forward_backward()) since zero_grad(), the model's making, or a skipped step throws
  // qkv::Error, the weights unchanged.
  void zero_grad();
  bool apply_gradients();

  // Data-parallel training (cpp/src/parallel): from now on apply_gradients() sums every rank's gradients into this
  // replica's before the step (each rank gives accumulate() the weight of its share of the global batch), the
  // sums overlapping the backward. nullptr: this process trains alone again. The caller keeps `sync` alive.
  void set_gradient_sync(dist::GradientSync* sync);

  // Quantized weights (qkv/quantize.h): every Linear weight (attention's in_proj_weight and out_proj, the
  // feed-forward's, the classifier's and the generator's layers, an untied lm_head) and, per options.embedding,
  // the token embedding are stored in `format` and their float32 values released, so the weights' memory falls
  // (memory().parameters: 4x for int8, about 7x for q4, 2x for f16 / bf16). Biases, LayerNorms and positions stay
  // float32. The model then generates, predicts, evaluates and saves as before (its checkpoints hold the packed
  // tensors: README "File layout"), but does not train: a training call throws qkv::Error (train LoRA adapters on
  // the quantized base instead), the model still usable. A model with adapters keeps training them, its base packed.
  // Quantizing a quantized model, or to F32, throws qkv::Error and changes nothing. A model on another device is
  // quantized there (the rounding is done on the host: the same bytes on every device).
  void quantize(WeightFormat format, const QuantizeOptions& options = {});
  // The activations of the products with the int8 and q4 weights (qkv/quantize.h), saved in the checkpoint
  // ("qkv.activations"). Int8 on a model without int8 or q4 weights throws qkv::Error and changes nothing.
  void set_quant_activations(QuantActivations activations);
  QuantActivations quant_activations() const;
  // The packed tensors' formats by name (empty for a float32 model).
  std::map<std::string, WeightFormat> weight_formats() const;

  // Access for tests, tools and checkpoints: parameters and gradients by (PyTorch-style) name. The spans are
  // host memory, so a model on the GPU refuses (qkv::Error): move it with to(Device::CPU) first. A packed tensor
  // (quantize) has empty spans: read its values through a checkpoint (save) instead.
  std::vector<ParameterView> parameters();

  // LoRA adapters (qkv/lora.h: targets, A's initial values, the dropout masks).
  // add_lora adds y += (alpha / rank) * dropout(x) A^T B^T to every targeted Linear, A (rank, in), B (out, rank) = 0,
  // so the model computes what it did until the adapters train. From then on every training call (train_step,
  // accumulate, apply_gradients, queue_train_step, data parallel) updates only the adapters: the base is frozen,
  // its gradients and Adam moments are released (memory() counts only the adapters'), and its backward computes
  // only what flows through it to earlier adapters. The base may be float32 or quantized (f16, bf16, int8, q4): a
  // quantized model trains adapters. The optimizer restarts for the adapters (step() counts their steps from 0;
  // skipped_steps() likewise). Refused (qkv::Error naming the argument; nothing changes) for bad options (rank < 1,
  // alpha not > 0, dropout outside [0, 1), an unknown, repeated or absent target, q/k/v with qkv), or when the model
  // already has adapters (remove_lora() first).
  void add_lora(const LoraOptions& options);
  bool has_lora() const;
  const LoraOptions& lora_options() const;  // qkv::Error when the model has no adapters
  // Folds scale * B A into the float32 base weights and removes the adapters; the model then trains whole again
  // (its optimizer restarts: step() 0). Refused on a quantized base (qkv::Error saying why: the fold would be
  // re-quantized, losing it), with a "head" adapter on a tied head (the fold would change the embedding lookup too),
  // and without adapters; nothing changes on error.
  void merge_lora();
  // Drops the adapters; the base weights are bit for bit what they were before add_lora. The model then trains
  // whole again (its optimizer restarts: step() 0). qkv::Error without adapters.
  void remove_lora();
  // The adapters' tensors (host memory, as parameters()): "<weight name without .weight>.lora_A.weight" and
  // ".lora_B.weight", e.g. "layers.0.self_attn.in_proj.lora_A.weight" (target "qkv"; in_proj_weight's stem is
  // "in_proj"), "layers.0.self_attn.in_proj_q.lora_A.weight" ("q"; _k, _v likewise),
  // "layers.0.self_attn.out_proj.lora_A.weight", "layers.0.linear1.lora_A.weight", "lm_head.lora_A.weight" (a tied
  // head: "lm_head" too). Per adapter A then B, in the model's registration order. Empty without adapters. A model
  // on the GPU refuses (qkv::Error) as parameters() does.
  std::vector<ParameterView> lora_parameters();

  // Checkpoints: safetensors with the weights under their PyTorch-style names, the config in the metadata
  // and, with_optimizer, the Adam moments and step counts (taken and skipped) so training resumes exactly.
  // save_file writes a temporary file and renames it into place: a failed save never damages an existing file.
  // `metadata` adds string keys to the file's "__metadata__" (e.g. "qkv.tokenizer", which `qkv generate`
  // reads); loading ignores them. A key the checkpoint writes itself ("qkv.model", "qkv.config",
  // "qkv.optimizer", "qkv.step", "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state", "qkv.version",
  // "qkv.crc32", "format", "qkv.quantized", "qkv.lora") is refused with qkv::Error naming it. With LoRA adapters the
  // checkpoint holds base + adapters, "qkv.lora" = to_string(lora_options()), and, with_optimizer, the adapters'
  // moments and steps (the frozen base has none). A quantized model's checkpoint holds an optimizer state only with
  // adapters (with_optimizer is ignored without: it has none).
  std::vector<uint8_t> save(bool with_optimizer = true, const std::map<std::string, std::string>& metadata = {});
  void save_file(const std::string& path, bool with_optimizer = true,
                 const std::map<std::string, std::string>& metadata = {});
  // Loads a checkpoint's state into this model; its config must match this model's (else qkv::Error
  // naming the field) and nothing changes on error. The file's adapters are added to a model that has none; a model
  // with other adapters (or adapters the file lacks) is refused: remove_lora() first.
  void load_state(std::span<const uint8_t> bytes);
  // Loads only the weights, by name, from any safetensors file: a qkv checkpoint or a PyTorch state dict
  // saved with qkv's names (README). Every parameter must be present with its shape; nothing changes on error.
  void load_weights(std::span<const uint8_t> bytes);

 protected:
  Model() = default;
  template <class M>
  friend class CheckpointLoader;  // builds a model and streams a checkpoint into its core
  friend struct io::ModelAccess;  // the same for a pretrained file (packed parameters have no public span)

  // What the shared calls work on, from the derived model.
  virtual models::ModelCore& core() = 0;
  const models::ModelCore& core() const { return const_cast<Model*>(this)->core(); }
  virtual const char* kind() const = 0;         // "language_model", "seq2seq", "classifier"
  virtual std::string config_json() const = 0;  // the config as checkpoints store it
  // A language model whose output projection is its token embedding: QuantizeOptions::embedding's default.
  virtual bool tied_head() const { return false; }
  // After new weights (moved = false: KV caches) or a move to another device (moved = true: workspace plans
  // too): forget what depends on them.
  virtual void reset(bool moved) = 0;
};

// Recompute's names as the npm package takes them ("auto", "on", "off"), and back: recompute_from_string throws
// qkv::Error naming `argument` and the choices for any other name.
const char* to_string(Recompute mode);
Recompute recompute_from_string(const std::string& name, const char* argument = "mode");

}  // namespace qkv
