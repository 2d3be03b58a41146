// The qkv tool's `quantize` command (commands.h): a checkpoint or a pretrained folder, its weight matrices packed
// to int8, q4, f16 or bf16 (qkv/quantize.h), written as a quantized checkpoint that generate and eval read.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>

#include "commands.h"
#include "io/checkpoint.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "qkv/tokenizer.h"
#include "task.h"

namespace qkv::cli {

// --- quantize --------------------------------------------------------------------------------------------

int run_quantize(const QuantizeArgs& a) {
  const WeightFormat format = weight_format_from_string(a.weights, "--weights");
  if (format == WeightFormat::F32)
    throw UsageError("--weights f32 is not a quantized format: expected int8, q4, f16 or bf16");
  QuantizeOptions options;
  if (a.embedding.given) options.embedding = a.embedding.value;
  std::unique_ptr<Model> model;
  std::map<std::string, std::string> meta;
  if (std::filesystem::is_directory(a.in)) {
    // A pretrained folder, as qkv import reads it, with its tokenizer kept so that qkv generate works on OUT.
    ImportedWeights r;
    model.reset(load_pretrained(a.in, {}, Device::CPU, &r).release());
    const std::optional<Tokenizer> tok = folder_tokenizer(a.in, r.tokenizer_files);
    if (tok) meta["qkv.tokenizer"] = tok->to_json();
    meta["qkv.imported_from"] = r.format;
  } else {
    // A qkv checkpoint of any kind; its own metadata (tokenizers, labels, training settings, the user's keys) is
    // kept, less what the checkpoint writes itself.
    const std::string text = read_text(a.in);
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    const SafetensorsFile file = [&] {
      try {
        return parse_safetensors(bytes);
      } catch (const Error& e) {
        throw Error(a.in + ": " + e.what());
      }
    }();
    const auto kind = file.metadata.find("qkv.model");
    check(kind != file.metadata.end(), a.in, ": not a qkv checkpoint (no \"qkv.model\" metadata): convert it with ",
          "qkv import first, or give a pretrained model's folder");
    const auto load = [&](auto loader) {
      return std::unique_ptr<Model>(io::with_path(a.in, [&] { return loader(bytes); }));
    };
    if (kind->second == "language_model") {
      model = load([](auto b) { return LanguageModel::load(b); });
    } else if (kind->second == "seq2seq") {
      model = load([](auto b) { return Seq2Seq::load(b); });
    } else {
      model = load([](auto b) { return Classifier::load(b); });
    }
    const std::set<std::string> own = {"qkv.model",         "qkv.config", "qkv.optimizer",       "qkv.step",
                                       "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state", "qkv.version",
                                       "qkv.crc32",         "format",     "qkv.quantized"};
    for (const auto& [key, value] : file.metadata)
      if (!own.count(key)) meta[key] = value;
  }
  const size_t before = model->memory().parameters;
  io::with_path(a.in, [&] { model->quantize(format, options); });
  model->save_file(a.out, false, meta);
  const size_t after = model->memory().parameters;
  std::printf("weights     %s: %zu tensors packed\n", to_string(format), model->weight_formats().size());
  std::printf("bytes       %zu -> %zu (%.2fx smaller)\n", before, after,
              static_cast<double>(before) / static_cast<double>(after));
  std::printf("wrote       %s\n", a.out.c_str());
  return 0;
}

}  // namespace qkv::cli
