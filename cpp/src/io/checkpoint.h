#pragma once
// Checkpoints: safetensors files holding a model's weights under their PyTorch-style names, and in
// __metadata__ the model kind ("qkv.model"), its config JSON ("qkv.config"), the optimizer config
// ("qkv.optimizer"), the steps taken ("qkv.step") and skipped under NonFinite::Skip ("qkv.skipped_steps"),
// the dropout pass counter ("qkv.passes") and the qkv version. With the optimizer state, the Adam moments are
// stored too ("optimizer.m.<name>", "optimizer.v.<name>"), so that training resumes exactly where it stopped.
// Reading ignores metadata keys it does not know: the qkv tool adds its tokenizers and training state
// ("qkv.tokenizer", cpp/tools/task.h) through save_checkpoint's `extra`, and the npm package a tokenizer and
// the user's own keys.
//
// A quantized model (Model::quantize) stores each packed tensor as its device rows, byte for byte: I8 (int8) or U8
// (q4) of shape (N, row_stride), F16 / BF16 of shape (N, K) (U8 (N, row_stride) when 2K is not a multiple of 4:
// the rows' padding), plus "<name>.scales", F32 (N, scales per row), for int8 and q4; the formats by name in
// "qkv.quantized" (a JSON object: {"layers.0.self_attn.in_proj_weight": {"format": "int8", "shape": [N, K]}, ...},
// the shape being the matrix's own, which the stored rows' cannot tell). No optimizer state: a
// quantized model does not train.
//
// A model with LoRA adapters (models/lora_set.h) also holds them, under their names ("layers.0.self_attn.in_proj.
// lora_A.weight", ...), and its options in "qkv.lora" (to_string(LoraOptions): "rank=8,alpha=16,..."); the optimizer
// state is then the adapters' (their moments, their optimizer's steps in "qkv.step"), the frozen base having none, so
// a quantized base with adapters has one. Loading builds the adapters from "qkv.lora" before the tensors arrive.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/model_core.h"
#include "qkv/safetensors.h"

namespace qkv::io {

struct Checkpoint {
  SafetensorsFile file;
  std::string config_json;
  OptimizerConfig optimizer;
  int step = 0;
  int skipped = 0;  // steps skipped under NonFinite::Skip ("qkv.skipped_steps"; 0 when absent)
  uint64_t passes = 0;
  bool has_optimizer_state = false;
  std::string format = "qkv";  // a foreign state dict's format (io/import.h): mapped when restored
  nn::Formats formats;         // the packed tensors ("qkv.quantized"): the model is built with them (ForLoading)
  std::map<std::string, std::vector<int64_t>> packed_shapes;  // and their matrices' shapes, checked against the model's
  bool int8_act = false;            // "qkv.activations" = "int8": the int8 and q4 products quantize their activations
  std::optional<LoraOptions> lora;  // the adapters ("qkv.lora"): added to the model before its tensors are restored
};

// The checkpoint's bytes, the header written once. `extra` adds metadata keys; one that the checkpoint
// writes itself ("qkv.model", "qkv.config", ..., "qkv.crc32", "format") raises qkv::Error naming it.
std::vector<uint8_t> save_checkpoint(models::ModelCore& core, const char* kind, const std::string& config_json,
                                     bool with_optimizer, const std::map<std::string, std::string>& extra = {});
// The same file written to `path` tensor by tensor from the model's memory (write_safetensors_atomic: a temporary
// file renamed into place), never a whole copy in memory.
void save_checkpoint_file(const std::string& path, models::ModelCore& core, const char* kind,
                          const std::string& config_json, bool with_optimizer,
                          const std::map<std::string, std::string>& extra = {});
// Parses and checks the header: a qkv checkpoint of this kind, or a foreign state dict of one (io/import.h;
// its config then holds what the file fixes, and no "seed"). qkv::Error otherwise (naming what it is).
Checkpoint read_checkpoint(std::span<const uint8_t> bytes, const char* kind);
// Copies the weights (and, when present, the moments and step counts) into the model. Every parameter
// must be present with its shape and no unknown tensor may be left over; on any error nothing is changed. The file's
// adapters ("qkv.lora") are added to a model that has none (true is returned: the caller forgets its workspace plans,
// as after add_lora); a model with other adapters, or with adapters the file lacks, is refused.
bool restore_checkpoint(models::ModelCore& core, const Checkpoint& checkpoint);
// restore_checkpoint's copy, the model's adapters already the file's.
void restore_checkpoint_tensors(models::ModelCore& core, const Checkpoint& checkpoint);

// Copies weights from any safetensors file: a qkv checkpoint, a state dict in qkv's names, or one in the
// names of the PyTorch code that trained it (io/import.h maps them; `config_json` is the model's config,
// for its heads). The optimizer state is left alone. Same checks as restore_checkpoint, every problem named
// at once; Adam moments in the file are ignored.
void restore_weights(models::ModelCore& core, std::span<const uint8_t> bytes, const std::string& config_json);

// Streaming: a qkv checkpoint read front to back (SafetensorsReader) straight into a model built from its header,
// never the whole file in memory. read_checkpoint's checks of the metadata, without the tensors: false when the
// file has no "qkv.model" (a foreign state dict, which needs the whole file: io/import.h), else `c` is filled.
bool checkpoint_from_header(const SafetensorsHeader& header, const char* kind, Checkpoint& c);

// The sink that writes each tensor into the model's parameter (and, with the optimizer state, its moments) as its
// bytes arrive: float32 into place on the CPU, converted (F16, BF16, F64) or uploaded through the reader's
// staging otherwise; the CRC-32 of each tensor checked as it completes. Built after the header: it checks what
// restore_checkpoint checks (every parameter present with its shape, nothing left over, all problems at once)
// and the checksum key, before any byte is written. A failure midway leaves the model partly written: load
// into a model that is discarded on error (load, load_file), never into one the user holds.
class CheckpointSink : public TensorSink {
 public:
  CheckpointSink(models::ModelCore& core, const Checkpoint& c, const SafetensorsHeader& header);
  std::span<uint8_t> place(size_t i) override;
  void take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) override;
  void end(size_t i) override;
  // After the last tensor: the optimizer's counts and the dropout passes, as restore_checkpoint sets them.
  void finish();

 private:
  models::ModelCore& core_;
  const Checkpoint& c_;
  const SafetensorsHeader& header_;
  std::vector<Span> dst_;  // per tensor: its destination (empty: a moment not restored)
  // Per tensor: where a packed parameter's rows or scales go as they are (empty: none); scales_of, for scales,
  // the parameter they belong to (checked once complete).
  struct Raw {
    std::span<uint8_t> to;
    const nn::Param* scales_of = nullptr;
  };
  std::vector<Raw> raw_;
  std::vector<std::string> sums_;
  std::vector<uint32_t> crc_;
  std::vector<float> floats_;  // conversion staging
};

// load_file's engine: the header of `path` read, then, for a qkv checkpoint of `kind`, make(c) builds the model
// (under nn::Parameters::ForLoading) and returns its core, into which the tensors stream. False, with nothing
// built, for a foreign state dict: the caller loads the whole file (read_file + load). Errors start with the path.
bool load_file_streaming(const std::string& path, const char* kind,
                         const std::function<models::ModelCore&(const Checkpoint&)>& make);
// The same for a file in memory (load(bytes)): each tensor copied once, into its parameter. False, with nothing
// built, for a foreign state dict or a header that does not parse (read_checkpoint then says why).
bool load_bytes_streaming(std::span<const uint8_t> bytes, const char* kind,
                          const std::function<models::ModelCore&(const Checkpoint&)>& make);

// qkv::Error naming the first field where a checkpoint's config differs from the model's. A config without
// "seed" (a foreign state dict's, read_checkpoint) is checked on the fields it has; qkv writes every field.
void check_same_config(const std::string& model_json, const std::string& checkpoint_json);

std::vector<uint8_t> read_file(const std::string& path);

// The file-based forms of a model's save/load, with the path in every error message.
void save_file(const std::string& path, const std::vector<uint8_t>& bytes);
template <class F>
auto with_path(const std::string& path, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace qkv::io
