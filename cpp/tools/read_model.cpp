// read_model (task.h): the input of qkv quantize and qkv merge, a pretrained folder or a qkv checkpoint of any kind.
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

ModelFile read_model(const std::string& path) {
  ModelFile out;
  if (std::filesystem::is_directory(path)) {
    ImportedWeights r;
    out.model.reset(load_pretrained(path, {}, Device::CPU, &r).release());
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
  // What io/checkpoint.cpp writes itself (and refuses as a caller's key).
  static const std::set<std::string> own = {"qkv.model",         "qkv.config", "qkv.optimizer",       "qkv.step",
                                            "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state", "qkv.version",
                                            "qkv.crc32",         "format",     "qkv.quantized",       "qkv.lora"};
  for (const auto& [key, value] : file.metadata)
    if (!own.count(key)) out.metadata[key] = value;
  return out;
}

}  // namespace qkv::cli
