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
#include "qkv/language_model.h"
#include "qkv/safetensors.h"

namespace qkv::io {

// GPT-2's config.json as qkv's LanguageModel config (JSON); qkv::Error naming the field qkv cannot honour (or the
// model_type it does not run). `notes` gets what differs from the source (dropout left out).
std::string gpt2_config(std::string_view config_json, std::vector<std::string>& notes);

// The sink that writes a GPT-2 model.safetensors (`header`, in the gpt2 format's names) into `model`'s parameters as
// its bytes arrive: the header planned and checked first (plan_header: every problem at once, before a byte). With
// `order` (shards: `header` joins theirs, `order` names the tensors in the order they will stream), the sink is not
// bound: bind() each shard's header before its bytes.
std::unique_ptr<ImportSink> gpt2_sink(LanguageModel& model, const SafetensorsHeader& header,
                                      const std::vector<std::string>* order = nullptr);

// model.safetensors.index.json's weight_map (`index_json`, its text; `where` starts the messages): each shard file
// (a file of the same folder: no '/' nor "..") and the tensors it must hold, by file name (the order shards stream).
std::map<std::string, std::set<std::string>> shard_map(std::string_view index_json, const std::string& where);

// qkv::Error "where: p1; p2; ..." naming at once every tensor the index puts in a shard that lacks it; nothing when
// `missing` is empty.
void check_shards(const std::string& where, const std::vector<std::string>& missing);

}  // namespace qkv::io
