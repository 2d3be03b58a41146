// QuantizeOptions::activations = Int8 and Model::set_quant_activations (qkv/quantize.h): decoding's products with int8
// and q4 weights quantize their activations to int8 (kernels/cpu/gemm_quant_dot.h). The logits against the same
// quantized model with float32 activations (near, not equal, where decoding's few rows take the path; equal where a
// prefill's many rows do not), the setting through checkpoints (every way of loading), and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/checksum.h"
#include "qkv/checkpoint_loader.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::quant_activations_test {
namespace {

LanguageModelConfig config(bool tied) {
  LanguageModelConfig c{.vocab_size = 23, .context = 12, .d_model = 64, .heads = 4, .layers = 2, .d_ff = 96, .seed = 4};
  c.tie_head = tied;
  return c;
}

// Weights of a spread of magnitudes (the init's are small and alike), the same for a given seed.
void scramble(Model& m, uint64_t seed) {
  Rng rng(seed);
  for (ParameterView& p : m.parameters())
    for (size_t i = 0; i < p.value.size(); ++i)
      p.value[i] = static_cast<float>(rng.normal() * (0.05 + 0.2 * static_cast<double>(i % 7) / 7.0));
}

std::vector<int32_t> ids(int n) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = (i * 7 + 3) % 23;
  return out;
}

// max |got - want| / max |want|.
double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  return worst / scale;
}

std::unique_ptr<LanguageModel> quantized(WeightFormat f, bool tied, QuantActivations a) {
  auto lm = std::make_unique<LanguageModel>(config(tied));
  scramble(*lm, 7);
  lm->quantize(f, {.embedding = true, .activations = a});
  return lm;
}

TEST(QuantActivations, DecodingMovesByTheActivationsRoundingAndPrefillNotAtAll) {
  for (WeightFormat f : {WeightFormat::Int8, WeightFormat::Q4})
    for (bool tied : {true, false}) {
      const auto i8 = quantized(f, tied, QuantActivations::Int8), f32 = quantized(f, tied, QuantActivations::F32);
      EXPECT_EQ(i8->quant_activations(), QuantActivations::Int8);
      EXPECT_EQ(f32->quant_activations(), QuantActivations::F32);
      // 6 rows (a batch of one, up to 8 rows): the int8 path. Its error is the activations' rounding: about 0.5% of a
      // product through each of the 2 layers' 4 products and the head; 3% bounds it with room, and it is not 0.
      const auto x = ids(6);
      const double rel = max_rel(i8->logits(x, 1, 6), f32->logits(x, 1, 6));
      EXPECT_LT(rel, 3e-2) << to_string(f) << " tied " << tied;
      EXPECT_GT(rel, 1e-6) << to_string(f) << " tied " << tied << ": the int8 path was not taken";
      // 18 rows: the panels' fp32 product, bit for bit the float32 activations' result.
      const auto y = ids(18);
      EXPECT_EQ(i8->logits(y, 2, 9), f32->logits(y, 2, 9)) << to_string(f);
      // Switched off, the model is the float32-activation one again; switched on, the same as quantized so.
      i8->set_quant_activations(QuantActivations::F32);
      EXPECT_EQ(i8->logits(x, 1, 6), f32->logits(x, 1, 6));
      f32->set_quant_activations(QuantActivations::Int8);
      i8->set_quant_activations(QuantActivations::Int8);
      EXPECT_EQ(i8->logits(x, 1, 6), f32->logits(x, 1, 6));
      // Generation (a prefill, then one-row decode steps through the KV cache) runs and gives tokens of the vocabulary.
      SamplingOptions greedy;
      greedy.temperature = 0.f;
      greedy.max_new_tokens = 6;
      const std::vector<int32_t> prompt = {1, 5, 7};
      const auto out = i8->generate(prompt, greedy);
      ASSERT_EQ(out.size(), 6u);
      for (int32_t t : out) EXPECT_TRUE(t >= 0 && t < 23);
    }
}

TEST(QuantActivations, TheSettingTravelsInTheCheckpoint) {
  const auto lm = quantized(WeightFormat::Q4, true, QuantActivations::Int8);
  const auto bytes = lm->save();
  EXPECT_EQ(parse_safetensors(bytes).metadata.at("qkv.activations"), "int8");
  EXPECT_EQ(parse_safetensors(quantized(WeightFormat::Q4, true, QuantActivations::F32)->save())
                .metadata.count("qkv.activations"),
            0u);
  const std::string path = ::testing::TempDir() + "/quant_activations.safetensors";
  lm->save_file(path);
  const auto x = ids(5);
  const auto want = lm->logits(x, 1, 5);
  std::vector<std::unique_ptr<LanguageModel>> loaded;
  loaded.push_back(LanguageModel::load(bytes));
  loaded.push_back(LanguageModel::load_file(path));
  CheckpointLoader<LanguageModel> stream(bytes.size());
  for (size_t at = 0; at < bytes.size(); at += 999)
    stream.push(std::span<const uint8_t>(bytes).subspan(at, std::min<size_t>(999, bytes.size() - at)));
  loaded.push_back(stream.finish());
  for (auto& m : loaded) {
    EXPECT_EQ(m->quant_activations(), QuantActivations::Int8);
    EXPECT_EQ(m->save(), bytes);
    EXPECT_EQ(m->logits(x, 1, 5), want);
  }
}

// The file's metadata changed and its checksums made to match (what a buggy writer would produce).
std::vector<uint8_t> with_metadata(const std::vector<uint8_t>& bytes, const std::string& key,
                                   const std::string& value) {
  SafetensorsFile file = parse_safetensors(bytes);
  std::vector<TensorRef> refs;
  for (const TensorEntry& t : file.tensors) refs.emplace_back(t.name, t.shape, t.dtype, t.bytes);
  std::map<std::string, std::string> meta = file.metadata;
  meta[key] = value;
  meta["qkv.crc32"] = io::checksum_metadata(refs);
  return serialize_safetensors(refs, meta);
}

TEST(QuantActivations, RefusalsNameWhatIsWrongAndChangeNothing) {
  // Weights without integer codes: refused before anything is quantized.
  LanguageModel lm(config(true), {});
  const auto x = ids(5);
  const auto before = lm.logits(x, 1, 5);
  EXPECT_NE(test::message_of([&] {
              lm.quantize(WeightFormat::F16, {.embedding = std::nullopt, .activations = QuantActivations::Int8});
            }).find("activations = int8 needs int8 or q4 weights (integer dot products), not f16"),
            std::string::npos);
  EXPECT_TRUE(lm.weight_formats().empty());
  EXPECT_EQ(lm.quant_activations(), QuantActivations::F32);
  EXPECT_NE(test::message_of([&] {
              lm.set_quant_activations(QuantActivations::Int8);
            }).find("set_quant_activations: activations = int8 needs int8 or q4 weights, and this model has none"),
            std::string::npos);
  EXPECT_EQ(lm.logits(x, 1, 5), before);
  lm.quantize(WeightFormat::BF16);
  EXPECT_NE(test::message_of([&] { lm.set_quant_activations(QuantActivations::Int8); }).find("has none"),
            std::string::npos);
  EXPECT_EQ(lm.quant_activations(), QuantActivations::F32);
  EXPECT_NE(test::message_of([] {
              quant_activations_from_string("int4");
            }).find("activations = \"int4\" is not an activation format: expected \"int8\" or \"f32\""),
            std::string::npos);
  // Files: an unknown value, and int8 activations in a file without quantized weights.
  const auto q4 = quantized(WeightFormat::Q4, true, QuantActivations::Int8)->save();
  EXPECT_NE(test::message_of([&] {
              LanguageModel::load(with_metadata(q4, "qkv.activations", "int4"));
            }).find("\"qkv.activations\" = \"int4\" is invalid: expected \"int8\" or \"f32\""),
            std::string::npos);
  LanguageModel fp32(config(true), {});
  EXPECT_NE(test::message_of([&] {
              LanguageModel::load(with_metadata(fp32.save(), "qkv.activations", "int8"));
            }).find("\"qkv.activations\" = \"int8\" but the file holds no quantized weights"),
            std::string::npos);
  // The key is the checkpoint's own: a caller's extra metadata may not set it.
  EXPECT_NE(test::message_of([&] {
              fp32.save(false, {{"qkv.activations", "int8"}});
            }).find("is reserved"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::quant_activations_test
