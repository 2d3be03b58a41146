#pragma once
// A model's core for the loaders that stream a foreign file into its parameters (io/pretrained_loader.cpp): a
// packed parameter's rows are no part of the public API (Model::parameters gives float32 spans only). Also
// load_adapter's, which builds the new adapters before the old ones go (io/lora_files.cpp).
#include "models/model_core.h"
#include "qkv/model.h"

namespace qkv::io {

struct ModelAccess {
  static models::ModelCore& core(Model& m) { return m.core(); }
  // Model::reset: after the core's adapters changed (as Model::add_lora does), or new weights.
  static void reset(Model& m, bool moved) { m.reset(moved); }
};

}  // namespace qkv::io
