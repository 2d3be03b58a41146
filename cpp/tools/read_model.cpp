// read_model, carried_metadata and check_output (task.h): what the converting commands read and where they write.
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "task.h"

namespace qkv::cli {

ModelFile read_model(const std::string& path, PretrainedWeights weights) {
  ModelFile out;
  if (std::filesystem::is_directory(path)) {
    ImportedWeights r;
    out.model.reset(load_pretrained(path, {}, Device::CPU, &r, weights).release());
    if (const std::optional<Tokenizer> tok = folder_tokenizer(path, r.tokenizer_files))
      out.metadata["qkv.tokenizer"] = tok->to_json();
    out.metadata["qkv.imported_from"] = r.format;
    return out;
  }
  const std::vector<uint8_t> bytes = io::read_file(path);
  const SafetensorsFile file = io::with_path(path, [&] { return parse_safetensors(bytes); });
  const auto kind = file.metadata.find("qkv.model");
  check(kind != file.metadata.end(), path, ": not a qkv checkpoint (no \"qkv.model\" metadata): convert it with ",
        "qkv import first, or give a pretrained model's folder");
  out.model = io::with_path(path, [&]() -> std::unique_ptr<Model> {
    if (kind->second == "language_model") return LanguageModel::load(bytes);
    if (kind->second == "seq2seq") return Seq2Seq::load(bytes);
    return Classifier::load(bytes);
  });
  out.metadata = carried_metadata(file.metadata);
  return out;
}

std::map<std::string, std::string> carried_metadata(const std::map<std::string, std::string>& metadata) {
  // What io/checkpoint.cpp writes itself (and refuses as a caller's key).
  static const std::set<std::string> own = {"qkv.model",         "qkv.config", "qkv.optimizer",       "qkv.step",
                                            "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state", "qkv.version",
                                            "qkv.crc32",         "format",     "qkv.quantized",       "qkv.lora"};
  std::map<std::string, std::string> kept;
  for (const auto& [key, value] : metadata)
    if (!own.count(key)) kept[key] = value;
  return kept;
}

void check_output(const std::string& out, const std::string& flag, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path(out);
  if (fs::is_directory(path, ec))
    throw UsageError(flag + " " + out + " is a folder: expected the path of the file to write");
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(folder, ec))
    throw UsageError(flag + " " + out + ": the folder " + folder.string() + " does not exist");
  if (!fs::exists(path, ec)) return;  // a new file replaces nothing
  // The files the model and adapter folders are read from (io/pretrained.cpp, io/lora_files.cpp).
  static const std::set<std::string> folder_files = {"model.safetensors",
                                                     "config.json",
                                                     "tokenizer.json",
                                                     "tokenizer_config.json",
                                                     "vocab.json",
                                                     "merges.txt",
                                                     "special_tokens_map.json",
                                                     "generation_config.json",
                                                     "adapter_config.json",
                                                     "adapter_model.safetensors"};
  for (const std::string& in : inputs) {
    if (in.empty() || !fs::exists(in, ec)) continue;
    if (fs::equivalent(path, in, ec))
      throw UsageError(flag + " " + out + " is the input " + in +
                       " itself: writing it would replace what is being read; give another path");
    if (fs::is_directory(in, ec) && fs::equivalent(folder, in, ec) && folder_files.count(path.filename().string()))
      throw UsageError(flag + " " + out + " would replace the folder " + in + "'s own " + path.filename().string() +
                       ": give a path outside the folder, or another name");
  }
}

}  // namespace qkv::cli
