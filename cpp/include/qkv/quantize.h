#pragma once
// Quantized weights: the formats a model's weight matrices can be stored in, and Model::quantize's options.
// The layouts (row strides, scales, rounding) are cpp/src/ops/weight_format.h's; README "Quantized weights" has
// the accuracy of each.
#include <optional>
#include <string>

namespace qkv {

// F32: float32, as trained. F16 / BF16: half-precision storage, computed in float32. Int8: symmetric, one float32
// scale per output row. Q4: 4-bit in groups of 32 along the input with one float32 scale per group (ONNX Runtime
// MatMulNBits' layout, Q4_0's scale rule).
enum class WeightFormat { F32 = 0, F16 = 1, BF16 = 2, Int8 = 3, Q4 = 4 };

// "f32", "f16", "bf16", "int8", "q4": the names checkpoints, the CLI and the npm package use.
const char* to_string(WeightFormat format);
// The format called `name`; qkv::Error naming the argument, the value and the accepted names otherwise.
WeightFormat weight_format_from_string(const std::string& name, const char* argument = "weights");

struct QuantizeOptions {
  // Also store the token embedding table(s) packed. For a language model with a tied head that table is also the
  // output projection, a product with every position's logits (GPT-2's 50257 x 768 table is 31% of its weights and
  // is read whole at every generated token). Unset: yes exactly when the head is tied; otherwise the embedding is
  // a gather of a few rows per token, and float32 keeps it exact.
  std::optional<bool> embedding;
};

}  // namespace qkv
