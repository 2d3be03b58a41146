#pragma once
// Quantized weights: the formats a model's weight matrices can be stored in, and Model::quantize's options.
// The layouts (row strides, scales, rounding) are cpp/src/ops/weight_format.h's; README "Quantized weights" has
// the accuracy of each.
#include <optional>
#include <string>

namespace qkv {

// F32: float32, as trained. F16 / BF16: half-precision storage, computed in float32. Int8: symmetric, one float32
// scale per output row. Q4: 4-bit in groups of 32 along the input with one bfloat16 scale per group (ONNX Runtime
// MatMulNBits' layout, Q4_0's scale rule).
enum class WeightFormat { F32 = 0, F16 = 1, BF16 = 2, Int8 = 3, Q4 = 4 };

// "f32", "f16", "bf16", "int8", "q4": the names checkpoints, the CLI and the npm package use.
const char* to_string(WeightFormat format);
// The format called `name`; qkv::Error naming the argument, the value and the accepted names otherwise.
WeightFormat weight_format_from_string(const std::string& name, const char* argument = "weights");
// The same for a format Model::quantize packs: "f32" is refused as not quantized, and the message lists the four.
WeightFormat quantized_format_from_string(const std::string& name, const char* argument = "weights");

// The activations of the products with int8 and q4 weights. F32 (the default): each product is the float32 product
// of the dequantized weights. Int8: decoding (up to 8 rows at a time) quantizes each row of activations to int8 in
// blocks of 32 (llama.cpp's Q8_0 rule, ONNX Runtime's MatMulNBits accuracy_level 4) and sums integer products, where
// the executor has that path (the CPU, natively and in WebAssembly; WebGPU and CUDA compute as F32): faster, and
// each product moves by the activations' rounding to 8 bits (README "Quantized weights" has the figures).
enum class QuantActivations { F32 = 0, Int8 = 1 };
// "f32", "int8".
const char* to_string(QuantActivations activations);
QuantActivations quant_activations_from_string(const std::string& name, const char* argument = "activations");

struct QuantizeOptions {
  // Also store the token embedding table(s) packed. For a language model with a tied head that table is also the
  // output projection, a product with every position's logits (GPT-2's 50257 x 768 table is 31% of its weights and
  // is read whole at every generated token). Unset: yes exactly when the head is tied; otherwise the embedding is
  // a gather of a few rows per token, and float32 keeps it exact.
  std::optional<bool> embedding;
  // Int8: with int8 or q4 weights only (qkv::Error otherwise); Model::set_quant_activations changes it later.
  QuantActivations activations = QuantActivations::F32;
};

}  // namespace qkv
