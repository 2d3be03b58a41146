#pragma once
// Reading the PyTorch fixtures (tests/fixtures/README.md has the contract) and comparing against them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/config.h"
#include "qkv/optimizer.h"
#include "qkv/parameter.h"
#include "qkv/safetensors.h"

namespace qkv::test {

inline SafetensorsFile fixture(const std::string& name) {
  return read_safetensors(std::string(QKV_FIXTURES_DIR) + "/" + name + ".safetensors");
}

inline nlohmann::json meta_json(const SafetensorsFile& f, const std::string& key) {
  return nlohmann::json::parse(f.metadata.at(key));
}

// max |got - want| / max |want| over all elements; on failure prints the first values that differ.
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                         double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what << ": size";
  double scale = 0, worst = 0;
  size_t worst_i = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) {  // also catches NaN
      worst = std::isnan(d) ? INFINITY : d;
      worst_i = i;
    }
  }
  const double rel = scale > 0 ? worst / scale : worst;
  EXPECT_LE(rel, rtol) << what << ": max relative difference " << rel << " (abs " << worst << ", scale " << scale
                       << ") at [" << worst_i << "]: got " << got[worst_i] << ", PyTorch " << want[worst_i];
}

// Copies every "param.<name>" of the fixture into the model's parameter of that name; all must match up.
inline void load_params(std::vector<ParameterView> params, const SafetensorsFile& f) {
  size_t in_file = 0;
  for (const auto& t : f.tensors) in_file += t.name.rfind("param.", 0) == 0;
  ASSERT_EQ(params.size(), in_file) << "the model and the fixture have different parameter counts";
  for (auto& p : params) {
    const std::string key = std::string("param.") + p.name;
    ASSERT_TRUE(f.contains(key)) << "the fixture has no " << key;
    const auto v = f.floats(key);
    ASSERT_EQ(v.size(), p.value.size()) << key;
    std::copy(v.begin(), v.end(), p.value.begin());
  }
}

inline void expect_grads(std::vector<ParameterView> params, const SafetensorsFile& f, double rtol) {
  for (auto& p : params)
    expect_close(std::string("grad.") + p.name, {p.grad.begin(), p.grad.end()}, f.floats(std::string("grad.") + p.name),
                 rtol);
}

inline std::vector<int32_t> ids(const SafetensorsFile& f, const std::string& name) {
  const auto v = f.ints(name);
  return {v.begin(), v.end()};
}

// The optimizer a fixture's script trained with (its "optimizer" metadata).
inline OptimizerConfig optimizer_of(const SafetensorsFile& f) {
  const auto o = meta_json(f, "optimizer");
  OptimizerConfig c;
  c.kind = parse_optimizer_kind(o.at("kind").get<std::string>());
  c.lr = o.at("lr").get<float>();
  c.beta1 = o.at("betas")[0].get<float>();
  c.beta2 = o.at("betas")[1].get<float>();
  c.eps = o.at("eps").get<float>();
  c.weight_decay = o.at("weight_decay").get<float>();
  c.decay_matrices_only = o.at("decay").get<std::string>() == "matrices";
  c.grad_clip = o.at("grad_clip").is_null() ? 0.f : o.at("grad_clip").get<float>();
  return c;
}

}  // namespace qkv::test
