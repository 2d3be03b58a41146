#pragma once
#include <vector>

#include "nn/parameters.h"
#include "qkv/parameter.h"

namespace qkv::models {

inline std::vector<ParameterView> views_of(nn::Parameters& params) {
  std::vector<ParameterView> out;
  for (nn::Param& p : params.all()) out.push_back({p.name.c_str(), p.shape, p.value, p.grad, p.m, p.v});
  return out;
}

}  // namespace qkv::models
