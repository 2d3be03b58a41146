#pragma once
#include <vector>

#include "nn/parameters.h"
#include "qkv/error.h"
#include "qkv/parameter.h"

namespace qkv::models {

// The spans are the model's memory, so only a model on the CPU can hand them out.
inline std::vector<ParameterView> views_of(nn::Parameters& params, const char* model) {
  check(params.device() == Device::CPU, model, "::parameters(): the model is on ", params.ops().name(),
        "; its tensors are not host memory: call to(Device::CPU) first, or save() a checkpoint");
  std::vector<ParameterView> out;
  for (nn::Param& p : params.all()) out.push_back({p.name.c_str(), p.shape, p.value, p.grad, p.m, p.v});
  return out;
}

}  // namespace qkv::models
