#pragma once
// A model's LoRA adapters (qkv/lora.h) alone, as PEFT saves them (PeftModel.save_pretrained), so that a PyTorch user
// loads qkv's adapter with PeftModel.from_pretrained and qkv loads theirs:
//
//   adapter_config.json          {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "lora_dropout": 0.05,
//                                 "target_modules": ["c_attn", "attn.c_proj"], "fan_in_fan_out": true, "bias": "none",
//                                 "modules_to_save": null, "task_type": "CAUSAL_LM", "inference_mode": true, ...}
//                                (keys sorted, two-space indent, as PEFT writes it)
//   adapter_model.safetensors    "base_model.model.<module>.lora_A.weight" F32 (r, in) and ".lora_B.weight" F32
//                                (out, r) for every adapted module, no adapter name inside; metadata {"format": "pt"}
//
// <module> is in one of two namings (AdapterNames):
//   Qkv    qkv's own: the adapter's stem in Model::lora_parameters(), e.g. "layers.0.self_attn.in_proj",
//          "layers.0.linear1", "lm_head", "classifier.0", "generator"
//   Gpt2   a language model as Hugging Face's GPT2LMHeadModel names its modules (a model imported from a GPT-2
//          folder): qkv -> transformer.h.N.attn.c_attn, out -> transformer.h.N.attn.c_proj, up ->
//          transformer.h.N.mlp.c_fc, down -> transformer.h.N.mlp.c_proj, head -> lm_head; fan_in_fan_out true
//          (GPT-2's Conv1D stores its weight [in, out]; PEFT's lora_A (r, in) and lora_B (out, r) are the same
//          either way, and c_attn's output columns are q, k, v in in_proj_weight's row order, so the tensors are
//          qkv's as they are). GPT-2 has no separate q, k or v module: those targets are refused in this naming.
// target_modules lists each adapted module kind once by the shortest suffix that PEFT's matching (a module whose
// name equals an entry or ends with "." + the entry) gives exactly the adapted modules: "c_attn", "attn.c_proj",
// "c_fc", "mlp.c_proj", "lm_head" (GPT-2); "in_proj", "in_proj_q", "out_proj", "linear1", "linear2", the head's
// stem (qkv).
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/model.h"

namespace qkv {

struct AdapterFiles {
  std::string config_json;           // adapter_config.json
  std::vector<uint8_t> safetensors;  // adapter_model.safetensors
};

enum class AdapterNames { Qkv, Gpt2 };

// The adapter alone (its current values; no optimizer state). `base_model` goes into base_model_name_or_path (the
// Hub id or folder the base came from; empty: null). qkv::Error without adapters, on a model on the GPU (as
// lora_parameters()), and in Gpt2 names for a model that is not a language model or for the targets q, k, v.
AdapterFiles save_adapter(Model& model, AdapterNames names, const std::string& base_model = "");
// The same written into the folder `dir` (created when missing) as adapter_config.json and adapter_model.safetensors,
// each atomically (a failed save leaves what was there); errors name the path.
void save_adapter_dir(Model& model, const std::string& dir, AdapterNames names, const std::string& base_model = "");

// Gives the model the file's adapters, replacing any it has: rank r, lora_alpha, lora_dropout and the targets (from
// target_modules and the tensors' modules, in either naming) from the config, A and B from the tensors (F32, F16,
// BF16 or F64); the optimizer restarts for them (add_lora). Everything is checked before the model changes (nothing
// changes on error), each refusal a qkv::Error: a config key qkv cannot honour, named (peft_type other than "LORA",
// bias other than "none", modules_to_save, use_dora, use_rslora, rank_pattern, alpha_pattern, layers_to_transform,
// a target_modules entry that names no module qkv adapts); every missing, mis-shaped and unexpected tensor named at
// once.
void load_adapter(Model& model, const AdapterFiles& files);
// The same from the folder `dir` (adapter_config.json and adapter_model.safetensors); errors name the folder.
void load_adapter_dir(Model& model, const std::string& dir);

}  // namespace qkv
