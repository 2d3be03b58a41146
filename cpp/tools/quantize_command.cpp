// The qkv tool's `quantize` command (commands.h): a checkpoint or a pretrained folder, its weight matrices packed
// to int8, q4, f16 or bf16 (qkv/quantize.h), written as a quantized checkpoint that generate and eval read.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "commands.h"
#include "io/checkpoint.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "task.h"

namespace qkv::cli {

// --- quantize --------------------------------------------------------------------------------------------

int run_quantize(const QuantizeArgs& a) {
  check_output(a.out, "OUT", {a.in});
  // (CLI11 already took only these four names; the core's parse is the one list of them.)
  const WeightFormat format = quantized_format_from_string(a.weights, "--weights");
  QuantizeOptions options;
  if (a.embedding.given) options.embedding = a.embedding.value;
  options.activations = quant_activations_from_string(a.activations, "--activations");
  if (options.activations == QuantActivations::Int8 && format != WeightFormat::Int8 && format != WeightFormat::Q4)
    throw UsageError("--activations int8 needs --weights int8 or q4 (integer dot products), not " + a.weights);
  // A folder to f16 / bf16 whose matrices the file stores so: loaded kept (PretrainedWeights::Keep), never as
  // float32, when that packs what quantize would (every Linear weight and the tied embedding: 4 per layer + 1), all
  // in this format; else (another dtype, a mixed file, --embedding given) the float32 load, quantized.
  const bool half = format == WeightFormat::F16 || format == WeightFormat::BF16;
  const bool try_keep = half && !a.embedding.given && std::filesystem::is_directory(a.in);
  ModelFile in = read_model(a.in, try_keep ? PretrainedWeights::Keep : PretrainedWeights::F32);
  const auto kept = in.model->weight_formats();
  const auto layers = [&] { return static_cast<size_t>(static_cast<LanguageModel&>(*in.model).config().layers); };
  const bool done = try_keep && !kept.empty() && kept.size() == 4 * layers() + 1 &&
                    std::all_of(kept.begin(), kept.end(), [&](const auto& f) { return f.second == format; });
  if (try_keep && !kept.empty() && !done) in = read_model(a.in);
  Model& model = *in.model;
  const std::map<std::string, std::string>& meta = in.metadata;
  // The float32 model's bytes: every tensor in 16-float steps (nn/parameters.cpp's layout).
  size_t before = 0;
  for (const ParameterView& p : model.parameters()) {
    size_t n = 1;
    for (const int64_t d : p.shape) n *= static_cast<size_t>(d);
    before += (n + 15) / 16 * 16 * sizeof(float);
  }
  if (!done) io::with_path(a.in, [&] { model.quantize(format, options); });
  model.save_file(a.out, false, meta);
  const size_t after = model.memory().parameters;
  std::printf("weights     %s: %zu tensors packed%s\n", to_string(format), model.weight_formats().size(),
              done ? " (kept as the folder stores them: no float32 copy)" : "");
  if (options.activations == QuantActivations::Int8)
    std::printf("activations int8 (decoding's products with the packed weights)\n");
  std::printf("bytes       %zu -> %zu (%.2fx smaller)\n", before, after,
              static_cast<double>(before) / static_cast<double>(after));
  std::printf("wrote       %s\n", a.out.c_str());
  return 0;
}

}  // namespace qkv::cli
