#pragma once
// A model's core for the loaders that stream a foreign file into its parameters (io/pretrained_loader.cpp): a
// packed parameter's rows are no part of the public API (Model::parameters gives float32 spans only).
#include "models/model_core.h"
#include "qkv/model.h"

namespace qkv::io {

struct ModelAccess {
  static models::ModelCore& core(Model& m) { return m.core(); }
};

}  // namespace qkv::io
