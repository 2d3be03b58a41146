#pragma once
// A model's LoRA adapters (qkv/lora.h): their options, their own Parameters (values, gradients, Adam moments in
// flat buffers of their own) and their own optimizer, so that training with adapters runs the optimizer, clipping,
// the non-finite checks, data-parallel reduction and checkpoints' optimizer state on the adapters' buffers only,
// while the base (ModelCore::params) is frozen: no gradients, no moments, its layers' backwards computing dx alone.
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "nn/lora.h"
#include "nn/parameters.h"
#include "qkv/lora.h"
#include "train/optimizer.h"

namespace qkv::models {

struct ModelCore;

struct LoraSet {
  LoraOptions options;
  nn::Parameters params;  // every adapter's A then B, in the sites' registration order (lora_parameters' order)
  train::Optimizer optimizer;
  std::deque<nn::LoraAdapter> adapters;  // one per adapted site, the same order
  std::vector<nn::LoraSite*> sites;      // where each sits

  LoraSet(const LoraOptions& o, const OptimizerConfig& config, ops::Backend& backend)
      : options(o), params(backend), optimizer(config) {}
};

// The target names qkv/lora.h lists, in its order.
const std::vector<std::string>& lora_target_names();
// Throws qkv::Error naming the option that is invalid (rank, alpha, dropout, targets), whatever the model.
void check_lora_options(const LoraOptions& o);

// Model::add_lora, merge_lora, remove_lora on the model's core (the steps in flight settled by the caller, which
// then forgets its workspace plans: the layers plan their adapters' buffers). Each either does everything or
// throws with nothing changed.
void add_lora(ModelCore& core, const LoraOptions& options);
// add_lora in two steps: the adapters built (every check of add_lora, the model unchanged), then attached (the base
// frozen: its gradients and moments released). A checkpoint's load checks its tensors against the built set
// before attaching it, so that a refused file leaves the model's optimizer state as it was.
// replacing: built to replace the model's adapters (load_adapter), so the model may have some.
std::unique_ptr<LoraSet> build_lora(ModelCore& core, const LoraOptions& options, bool replacing = false);
void attach_lora(ModelCore& core, std::unique_ptr<LoraSet> set);
void merge_lora(ModelCore& core);
void remove_lora(ModelCore& core);

}  // namespace qkv::models
