#pragma once
// Mapping a PyTorch state dict, in the names (and the variant of the architecture) of the code that trained
// it, onto a qkv model's parameters: the engine behind load_weights, load_state and `qkv import`
// (qkv/import.h lists the formats). Each format is a table from qkv's parameter names to the file's
// tensors and how to build the parameter from them (copy, stack W_q|W_k|W_v, expand seed 004's shared
// per-head projections, zeros for a bias the source has not got). Buffers the source keeps beside its
// weights (a sinusoidal table, nanoGPT's causal mask) are checked against what qkv computes, then ignored.
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/import.h"
#include "qkv/safetensors.h"

namespace qkv::io {

// A qkv parameter to fill: its name and shape.
struct Target {
  std::string name;
  std::vector<int64_t> shape;
};

// The format of a state dict, told by its names ("qkv", "torch", "nanogpt", "seed000", ...);
// qkv::Error listing the formats when none fits.
std::string detect_format(const SafetensorsFile& file);

// The weights of `targets` (a model of `kind`: "language_model", "seq2seq" or "classifier", with `heads`
// attention heads) read from `file` in `format`, as a safetensors file under qkv's names (F32). Throws
// qkv::Error naming every missing, left-over and mis-shaped tensor of the file at once. `notes` gets
// a line per buffer checked and ignored, and per quirk of the source.
SafetensorsFile map_weights(const SafetensorsFile& file, const std::string& format, const std::string& kind,
                            const std::vector<Target>& targets, int heads, std::vector<std::string>* notes = nullptr);

// The config a foreign state dict fixes (load_state checks it against the model's): its shapes, and the
// choices its format makes (seed 004's heads, nanoGPT's pre-LN GELU, ...); what neither tells (most formats'
// heads, nn.Transformer's activation) is left out, and no "seed" is written (check_same_config then checks
// only the fields present). `kind` gets the model kind the file is a state dict of.
std::string imported_config(const SafetensorsFile& file, const std::string& format, std::string& kind);

// The weights of a `kind` model of config `config_json` from `file` (in `format`): map_weights with the
// model's parameters as targets. The file is taken (moved in) and freed once mapped.
SafetensorsFile mapped_weights(SafetensorsFile file, const std::string& format, const std::string& kind,
                               const std::string& config_json, std::vector<std::string>* notes);

// import_weights once the config is known: `file` (in `format`) mapped onto a `kind` model of config
// `config_json` (import_pretrained's config comes from config.json, import_weights' from the shapes). The file
// is taken (moved in) so that its tensors are freed once mapped, before the output is written.
ImportedWeights import_into(SafetensorsFile file, const std::string& format, const std::string& kind,
                            const std::string& config_json);

// The model kind whose parameters these are (seq2seq: "generator.weight"; classifier: "classifier..."),
// for load_weights, which knows the model's parameters but not its class.
std::string kind_of(const std::vector<Target>& targets);

}  // namespace qkv::io
