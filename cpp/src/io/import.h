#pragma once
// Mapping a PyTorch state dict, in the names (and the variant of the architecture) of the code that trained
// it, onto a qkv model's parameters: the engine behind load_weights, load_state and `qkv import`
// (qkv/import.h lists the formats). Each format is a table from qkv's parameter names to the file's
// tensors and how to build the parameter from them (copy, stack W_q|W_k|W_v, expand seed 004's shared
// per-head projections, zeros for a bias the source has not got). Buffers the source keeps beside its
// weights (a sinusoidal table, nanoGPT's causal mask) are checked against what qkv computes, then ignored.
#include <cstdint>
#include <map>
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

// How a qkv parameter is built from the file's tensors.
enum class Op {
  Copy,         // one tensor, the same shape
  CopyOrZeros,  // the same, or zeros when the source has none (nanoGPT's LayerNorm without bias)
  Transpose,    // one tensor stored [in, out] (GPT-2's Conv1D: y = x W + b), qkv's [out, in] is its transpose
  Stack3,       // W_q, W_k, W_v (or their biases) stacked on rows: in_proj_weight / in_proj_bias
  Expand3,      // seed 004: q, k, v projections (hd, hd) shared by all heads -> block-diagonal (C, C) each,
                // stacked; q scaled by sqrt(hd / C) so that qkv's 1/sqrt(hd) gives the seed's 1/sqrt(C)
  Zeros,        // no source: a bias the source has not got (seed 004's q/k/v), exact for the forward
};

// One parameter to build: from which of the file's tensors (their names in the file; none for Zeros and for a
// CopyOrZeros whose source is absent), by which operation.
struct ParamPlan {
  std::string name;
  std::vector<int64_t> shape;
  Op op = Op::Copy;
  std::vector<std::string> parts;
};

// How a file's tensors become a model's parameters, decided from the names, shapes and dtypes alone (a header is
// enough: no tensor's bytes are read). What can only be judged by value (a buffer qkv computes itself, a tied
// head's copy of the embedding) is listed in `checks` for check_values.
struct WeightPlan {
  std::string format, kind;
  int heads = 0;
  int64_t C = 0;  // the model's width (its token embedding's columns), for a position table's check
  std::vector<ParamPlan> params;
  std::vector<std::string> checks;  // the file's names of the tensors checked by value, then ignored
  // A head kept beside the embedding it is tied to (GPT-2's, nanoGPT's lm_head.weight), one of `checks`: its file
  // name, the embedding's, what is wrong when they differ by value, and the note when they do not ("" for none).
  std::string tied_head, tied_to, head_differs, head_note;
  std::vector<std::string> missing, misshaped, wrong, leftover;  // what does not fit, by kind
  std::vector<std::string> notes;
  std::map<std::string, int> buffers;  // gpt2: the attn.bias / attn.masked_bias buffers check_values passed, by kind
  // Every problem at once: "the file (format F) does not fit this K: tensor ... is missing; ..."; "" when none.
  std::string problems() const;
};

// The plan of `file`'s tensors onto `targets` (a model of `kind` with `heads` attention heads) in `format`. Reads
// only the tensors' names, dtypes and shapes: `file` may hold no bytes at all (a header, parse_safetensors_header).
WeightPlan plan_weights(const SafetensorsFile& file, const std::string& format, const std::string& kind,
                        const std::vector<Target>& targets, int heads);
// The checks by value of those of plan.checks that `file` holds, with their bytes (and, for a tied head, the
// embedding's): what is wrong is added to plan.wrong, what was checked and ignored to plan.notes (GPT-2's buffers
// counted in plan.buffers: gpt2_buffer_notes says them once all are checked). A file may hold some of the checked
// tensors at a time: a stream checks each as it completes.
void check_values(const SafetensorsFile& file, WeightPlan& plan);
// The values of parameter p as map_weights builds them, from `file`'s bytes (float32, p.shape).
std::vector<float> build_param(const SafetensorsFile& file, const ParamPlan& p, int heads);

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

// What import_weights reads from a file before mapping it: its format (`o.from`, or detected), the model kind, and
// that model's config (from the shapes and the options; a qkv checkpoint's from its metadata). Reads only names,
// dtypes and shapes, except nanoGPT's tie_head, which compares lm_head.weight's bytes with transformer.wte.weight's
// (a file without bytes, a header, reads as tied).
std::string import_config(const SafetensorsFile& file, const ImportOptions& o, std::string& format, std::string& kind);

// import_weights once the config is known: `file` (in `format`) mapped onto a `kind` model of config
// `config_json` (import_pretrained's config comes from config.json, import_weights' from the shapes). The file
// is taken (moved in) so that its tensors are freed once mapped, before the output is written.
ImportedWeights import_into(SafetensorsFile file, const std::string& format, const std::string& kind,
                            const std::string& config_json);

// The model kind whose parameters these are (seq2seq: "generator.weight"; classifier: "classifier..."),
// for load_weights, which knows the model's parameters but not its class.
std::string kind_of(const std::vector<Target>& targets);

}  // namespace qkv::io
