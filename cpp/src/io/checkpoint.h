#pragma once
// Checkpoints: safetensors files holding a model's weights under their PyTorch-style names, and in
// __metadata__ the model kind ("qkv.model"), its config JSON ("qkv.config"), the optimizer config
// ("qkv.optimizer"), the steps taken ("qkv.step") and skipped under NonFinite::Skip ("qkv.skipped_steps"),
// the dropout pass counter ("qkv.passes") and the qkv version. With the optimizer state, the Adam moments are
// stored too ("optimizer.m.<name>", "optimizer.v.<name>"), so that training resumes exactly where it stopped.
// Reading ignores metadata keys it does not know: the qkv tool adds its tokenizers and training state
// ("qkv.tokenizer", cpp/tools/task.h) through save_checkpoint's `extra`, and the npm package a tokenizer and
// the user's own keys.
#include <cstdint>
#include <map>
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
};

// The checkpoint's bytes, the header written once. `extra` adds metadata keys; one that the checkpoint
// writes itself ("qkv.model", "qkv.config", ..., "qkv.crc32", "format") raises qkv::Error naming it.
std::vector<uint8_t> save_checkpoint(models::ModelCore& core, const char* kind, const std::string& config_json,
                                     bool with_optimizer, const std::map<std::string, std::string>& extra = {});
// Parses and checks the header: a qkv checkpoint of this kind, or a foreign state dict of one (io/import.h;
// its config then holds what the file fixes, and no "seed"). qkv::Error otherwise (naming what it is).
Checkpoint read_checkpoint(std::span<const uint8_t> bytes, const char* kind);
// Copies the weights (and, when present, the moments and step counts) into the model. Every parameter
// must be present with its shape and no unknown tensor may be left over; on any error nothing is changed.
void restore_checkpoint(models::ModelCore& core, const Checkpoint& checkpoint);

// Copies weights from any safetensors file: a qkv checkpoint, a state dict in qkv's names, or one in the
// names of the PyTorch code that trained it (io/import.h maps them; `config_json` is the model's config,
// for its heads). The optimizer state is left alone. Same checks as restore_checkpoint, every problem named
// at once; Adam moments in the file are ignored.
void restore_weights(models::ModelCore& core, std::span<const uint8_t> bytes, const std::string& config_json);

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
