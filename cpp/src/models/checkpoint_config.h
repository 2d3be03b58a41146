#pragma once
// The config a model's load() builds itself from. A qkv checkpoint carries it whole; a foreign state dict
// (io/import.h) only what its shapes and format fix, which may not be all (seed 003's classifier has no position
// table, so no context): then the error keeps the missing field and says the two ways such a file does load.
#include <string>

#include "io/checkpoint.h"
#include "qkv/error.h"

namespace qkv::models {

template <class Parse>
auto checkpoint_config(const io::Checkpoint& c, const char* kind, Parse parse) -> decltype(parse(c.config_json)) {
  try {
    return parse(c.config_json);
  } catch (const Error& e) {
    if (c.format == "qkv") throw;
    throw Error(detail::cat("checkpoint: a ", c.format, " state dict does not fix the whole config of a ", kind, " (",
                            e.what(), "): create the model with its config and load the file with ",
                            "load_weights (JS: loadWeights), or convert it once with `qkv import --from ", c.format,
                            " IN OUT` (its options give what the file cannot), which load() then reads",
                            c.format == "gpt2"
                                ? "; a Hugging Face folder (config.json + model.safetensors) loads whole "
                                  "with load_pretrained (JS: LanguageModel.importPretrained) or "
                                  "`qkv import DIR OUT`"
                                : ""));
  }
}

}  // namespace qkv::models
