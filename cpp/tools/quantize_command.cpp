// The qkv tool's `quantize` command (commands.h): a checkpoint or a pretrained folder, its weight matrices packed
// to int8, q4, f16 or bf16 (qkv/quantize.h), written as a quantized checkpoint that generate and eval read.
#include <cstdio>
#include <string>

#include "commands.h"
#include "io/checkpoint.h"
#include "qkv/error.h"
#include "task.h"

namespace qkv::cli {

// --- quantize --------------------------------------------------------------------------------------------

int run_quantize(const QuantizeArgs& a) {
  const WeightFormat format = weight_format_from_string(a.weights, "--weights");
  if (format == WeightFormat::F32)
    throw UsageError("--weights f32 is not a quantized format: expected int8, q4, f16 or bf16");
  QuantizeOptions options;
  if (a.embedding.given) options.embedding = a.embedding.value;
  auto [model, meta] = read_model(a.in);
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
