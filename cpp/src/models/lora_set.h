#pragma once
// A model's LoRA adapters (qkv/lora.h): their options, their own Parameters (values, gradients, Adam moments in
// flat buffers of their own) and their own optimizer, so that training with adapters runs the optimizer, clipping,
// the non-finite checks and data-parallel reduction on the adapters' buffers only, and the base stays frozen.
#include <string>
#include <vector>

#include "qkv/lora.h"

namespace qkv::models {

// The target names qkv/lora.h lists, in its order.
const std::vector<std::string>& lora_target_names();
// Throws qkv::Error naming the option that is invalid (rank, alpha, dropout, targets), whatever the model.
void check_lora_options(const LoraOptions& o);

}  // namespace qkv::models
