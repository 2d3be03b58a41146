#pragma once
// Hugging Face GPT-2 folders, the parts shared by import_pretrained (io/pretrained.cpp) and the streaming
// PretrainedLoader (io/pretrained_loader.cpp): config.json read as a qkv config, and the sink that writes a
// model.safetensors' tensors into a LanguageModel's parameters as they arrive (io/import_sink.h).
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/import_sink.h"
#include "nn/parameters.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"

namespace qkv::io {

// GPT-2's config.json as qkv's LanguageModel config (JSON); qkv::Error naming the field qkv cannot honour (or the
// model_type it does not run). `notes` gets what differs from the source (dropout left out).
std::string gpt2_config(std::string_view config_json, std::vector<std::string>& notes);

// A GPT-2's parameters as a loader plans them before the model exists (the model built ShapesOnly: no memory): their
// names and shapes, and those Model::quantize packs (the Linear weights and the token embedding, tied to the head).
struct Gpt2Layout {
  std::vector<Target> targets;
  std::set<std::string> packable;
  int heads = 0;
};
// `config`: the qkv config (gpt2_config's); qkv::Error for one the model refuses.
Gpt2Layout gpt2_layout(const std::string& config);

// PretrainedWeights::Keep's formats: each packable parameter that the plan builds from one tensor of `header` (copied
// or transposed) stored F16 or BF16, in that format; a tied head and its embedding only when both have that dtype.
nn::Formats kept_formats(const WeightPlan& plan, const SafetensorsHeader& header, const Gpt2Layout& layout);

// A GPT-2 model.safetensors' (`header`, in the gpt2 format's names) model and the sink that writes the file's tensors
// into its parameters as its bytes arrive: the header planned and checked first (plan_header: every problem at once,
// before a byte, and before the model's memory is allocated), the model then built for loading (with `weights` Keep,
// kept_formats packed from the start). With `order` (shards: `header` joins theirs, `order` names the tensors in the
// order they will stream), the sink is not bound: bind() each shard's header before its bytes.
struct Gpt2Target {
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<ImportSink> sink;
};
Gpt2Target gpt2_target(const Gpt2Layout& layout, const std::string& config, const OptimizerConfig& optimizer,
                       const SafetensorsHeader& header, const std::vector<std::string>* order,
                       PretrainedWeights weights);

// model.safetensors.index.json's weight_map (`index_json`, its text; `where` starts the messages): each shard file
// (a file of the same folder: no '/' nor "..") and the tensors it must hold, by file name (the order shards stream).
std::map<std::string, std::set<std::string>> shard_map(std::string_view index_json, const std::string& where);

// qkv::Error "where: p1; p2; ..." naming at once every tensor the index puts in a shard that lacks it; nothing when
// `missing` is empty.
void check_shards(const std::string& where, const std::vector<std::string>& missing);

}  // namespace qkv::io
