#pragma once
// The qkv tool's LoRA commands and flags (lora_commands.cpp): `qkv train --lora SPEC --init MODEL` (with
// --adapter-out DIR), `qkv merge MODEL ADAPTER_DIR OUT`, `qkv generate --adapter DIR`, and the adapter rows of
// `qkv info`. run_train (commands.cpp) calls the hooks below; the adapters' files are qkv/lora_files.h's.
#include <memory>
#include <string>

#include "commands.h"
#include "qkv/safetensors.h"
#include "task.h"

namespace qkv::cli {

struct MergeArgs {
  std::string model, adapter, out;
};

// qkv train --init MODEL --lora SPEC: the task of MODEL (a checkpoint written by qkv train or qkv import with a
// tokenizer, or a Hugging Face GPT-2 folder) with the data of --data and the adapters of --lora added (its base
// frozen); the training state from --seed, --batch (default 8), --steps (default 1000), --eval-every. UsageError for
// flags that do not combine (--lora without --init, --init with --resume, --config, --tokenizer, --vocab-size).
std::unique_ptr<Task> lora_task(const TrainArgs& args);
// Writes the adapter of a training run's model to --adapter-out (nothing without it), in --adapter-names (default:
// GPT-2's for a model from a GPT-2 folder or a checkpoint `qkv import` made of one, else qkv's).
void write_adapter(const TrainArgs& args, Task& task);
// Loads --adapter DIR (a PEFT adapter folder) onto the model generate runs (nothing without it).
void load_generate_adapter(const std::string& dir, Model& model);
// qkv info: "lora" rows for a checkpoint with adapters ("qkv.lora" metadata): the options and the adapters' tensors.
void info_lora(const SafetensorsFile& file);

int run_merge(const MergeArgs& args);

}  // namespace qkv::cli
