#pragma once
// Gradient clipping and the AdamW step over a model's Parameters.
#include "nn/parameters.h"
#include "qkv/language_model.h"

namespace qkv::train {

// The global L2 norm of all gradients (computed in double).
double grad_norm(nn::Parameters& params);
// Scales all gradients so their global norm is at most max_norm (torch.nn.utils.clip_grad_norm_).
void clip_grad_norm(nn::Parameters& params, double norm, float max_norm);
// One AdamW step; t is the 1-based step count. Weight decay only where Param::decay.
void adamw_update(nn::Parameters& params, const AdamWConfig& config, int t);

}  // namespace qkv::train
