// Model::quantize: which tensors are packed, the memory they free, the forward through the packed products against
// a float32 model holding the same (dequantized) weights, generation, checkpoints (round trips, streaming, bad
// files) and the errors (training, quantizing twice, unknown formats).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/checksum.h"
#include "ops/webgpu_loopback.h"
#include "ops/weight_format.h"
#include "ops/weight_quantize.h"
#include "qkv/checkpoint_loader.h"
#include "qkv/classifier.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::quantize_test {
namespace {

using ops::row_stride;
using ops::scales_per_row;

const WeightFormat kFormats[] = {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4};

// Ragged shapes: K = 36 (d_model) and 38 (d_ff, linear2's input) are not multiples of q4's group of 32; V = 23 and
// 3C = 108 rows.
LanguageModelConfig lm_config(bool tied) {
  LanguageModelConfig c{.vocab_size = 23, .context = 12, .d_model = 36, .heads = 3, .layers = 2, .d_ff = 38, .seed = 4};
  c.tie_head = tied;
  return c;
}

std::vector<int32_t> ids(int n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& x : out) x = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
  return out;
}

// Gives every weight of `m` (trained or not, the init's values are small) a spread of magnitudes per row, so that
// int8's and q4's scales differ between rows and groups.
void scramble(Model& m, uint64_t seed) {
  Rng rng(seed);
  for (ParameterView& p : m.parameters())
    for (size_t i = 0; i < p.value.size(); ++i)
      p.value[i] = static_cast<float>(rng.normal() * (0.05 + 0.2 * static_cast<double>(i % 7) / 7.0));
}

// The float32 model's weights replaced by what `format` stores: dequantize(quantize(w)) for each tensor the
// quantized model packs (the names in `formats`).
void dequantize_in_place(Model& m, const std::map<std::string, WeightFormat>& formats) {
  for (ParameterView& p : m.parameters()) {
    const auto it = formats.find(p.name);
    if (it == formats.end()) continue;
    const auto f = static_cast<ops::WeightFormat>(it->second);
    const int N = static_cast<int>(p.shape[0]), K = static_cast<int>(p.shape[1]);
    std::vector<uint8_t> packed(static_cast<size_t>(N) * row_stride(f, K));
    std::vector<float> scales(static_cast<size_t>(N) * scales_per_row(f, K));
    ops::quantize_rows(f, p.value.data(), N, K, packed.data(), scales.data());
    ops::dequantize_rows_host(f, packed.data(), scales.data(), N, K, p.value.data());
  }
}

// The largest |got - want| over the largest |want|: infinite for a NaN or a size that differs, so that a bound on it
// fails for either.
double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0, scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]) / scale;
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

std::set<std::string> names_of(const std::map<std::string, WeightFormat>& formats) {
  std::set<std::string> out;
  for (const auto& [name, f] : formats) out.insert(name);
  return out;
}

// The weights every Linear of a 2-layer LanguageModel has (qkv's names), and the head / embedding.
std::set<std::string> lm_matrices(bool tied, bool embedding) {
  std::set<std::string> out;
  for (int l = 0; l < 2; ++l)
    for (const char* w :
         {".self_attn.in_proj_weight", ".self_attn.out_proj.weight", ".linear1.weight", ".linear2.weight"})
      out.insert("layers." + std::to_string(l) + w);
  if (!tied) out.insert("lm_head.weight");
  if (embedding) out.insert("tok_emb.weight");
  return out;
}

// A checkpoint loaded every way a user can: its bytes, its file (already written at `path`), streamed in pieces.
std::vector<std::unique_ptr<LanguageModel>> loaded_every_way(const std::vector<uint8_t>& bytes, const std::string& path,
                                                             size_t piece) {
  std::vector<std::unique_ptr<LanguageModel>> loaded;
  loaded.push_back(LanguageModel::load(bytes));
  loaded.push_back(LanguageModel::load_file(path));
  CheckpointLoader<LanguageModel> stream(bytes.size());
  for (size_t at = 0; at < bytes.size(); at += piece)
    stream.push(std::span<const uint8_t>(bytes).subspan(at, std::min(piece, bytes.size() - at)));
  loaded.push_back(stream.finish());
  return loaded;
}

TEST(Quantize, PacksEveryLinearAndTheTiedEmbeddingByDefault) {
  for (bool tied : {true, false}) {
    LanguageModel lm(lm_config(tied), {});
    lm.quantize(WeightFormat::Int8);
    EXPECT_EQ(names_of(lm.weight_formats()), lm_matrices(tied, tied)) << "tied " << tied;
    for (const auto& [name, f] : lm.weight_formats()) EXPECT_EQ(f, WeightFormat::Int8) << name;
  }
  LanguageModel with(lm_config(false), {}), without(lm_config(true), {});
  with.quantize(WeightFormat::Q4, {.embedding = true});
  without.quantize(WeightFormat::Q4, {.embedding = false});
  EXPECT_EQ(names_of(with.weight_formats()), lm_matrices(false, true));
  EXPECT_EQ(names_of(without.weight_formats()), lm_matrices(true, false));
}

// memory().parameters is the float32 buffer (every tensor padded to 16 floats) plus, per packed tensor, its rows
// and scales each padded to 64 bytes; the gradients and moments are released.
TEST(Quantize, MemoryFallsToThePackedBytes) {
  for (WeightFormat f : kFormats) {
    LanguageModel lm(lm_config(true), {});
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const ParameterView& p : lm.parameters()) shapes[p.name] = {p.shape.begin(), p.shape.end()};
    const size_t before = lm.memory().parameters;
    lm.quantize(f);
    const auto packed = lm.weight_formats();
    size_t want = 0;
    for (const auto& [name, shape] : shapes) {
      size_t numel = 1;
      for (int64_t d : shape) numel *= static_cast<size_t>(d);
      if (!packed.count(name)) {
        want += (numel + 15) / 16 * 16 * sizeof(float);
        continue;
      }
      const auto of = static_cast<ops::WeightFormat>(f);
      const int N = static_cast<int>(shape[0]), K = static_cast<int>(shape[1]);
      want += (static_cast<size_t>(N) * row_stride(of, K) + 63) / 64 * 64 +
              (static_cast<size_t>(N) * scales_per_row(of, K) * sizeof(float) + 63) / 64 * 64;
    }
    const MemoryUsage m = lm.memory();
    EXPECT_EQ(m.parameters, want) << to_string(f);
    EXPECT_LT(m.parameters, before) << to_string(f);
    EXPECT_EQ(m.gradients, 0u);
    EXPECT_EQ(m.optimizer, 0u);
    EXPECT_EQ(lm.num_parameters(), [&] {
      size_t n = 0;
      for (const auto& [name, shape] : shapes) n += static_cast<size_t>(shape[0]) * (shape.size() > 1 ? shape[1] : 1);
      return n;
    }());
  }
}

// The quantized model's logits are those of a float32 model holding the dequantized weights: the packed product
// is the same math (gemm_quant's contract), so they agree to float32 summation order.
TEST(Quantize, LanguageModelLogitsMatchTheDequantizedWeights) {
  for (WeightFormat f : kFormats)
    for (bool tied : {true, false}) {
      LanguageModel lm(lm_config(tied), {}), ref(lm_config(tied), {});
      scramble(lm, 7);
      scramble(ref, 7);
      lm.quantize(f, {.embedding = true});
      dequantize_in_place(ref, lm.weight_formats());
      const int B = 2, T = 9;
      const auto x = ids(B * T, 23, 3);
      EXPECT_LT(max_rel(lm.logits(x, B, T), ref.logits(x, B, T)), 1e-5) << to_string(f) << " tied " << tied;
      // Generation through the KV cache, greedy: the same tokens.
      SamplingOptions greedy;
      greedy.temperature = 0.f;
      greedy.max_new_tokens = 8;
      const std::vector<int32_t> prompt = {1, 5, 7};
      EXPECT_EQ(lm.generate(prompt, greedy), ref.generate(prompt, greedy)) << to_string(f);
    }
}

TEST(Quantize, Seq2SeqAndClassifierMatchTheDequantizedWeights) {
  const Seq2SeqConfig sc{.src_vocab = 17,
                         .tgt_vocab = 19,
                         .context = 10,
                         .d_model = 36,
                         .heads = 3,
                         .encoder_layers = 1,
                         .decoder_layers = 2,
                         .d_ff = 40,
                         .seed = 2};
  const ClassifierConfig cc{
      .vocab_size = 21, .context = 10, .d_model = 36, .heads = 3, .layers = 2, .d_ff = 40, .classes = 5, .seed = 6};
  for (WeightFormat f : {WeightFormat::Int8, WeightFormat::Q4}) {
    Seq2Seq s(sc, {}), sr(sc, {});
    scramble(s, 1);
    scramble(sr, 1);
    s.quantize(f, {.embedding = true});
    dequantize_in_place(sr, s.weight_formats());
    EXPECT_TRUE(s.weight_formats().count("generator.weight"));
    EXPECT_TRUE(s.weight_formats().count("decoder.layers.1.multihead_attn.in_proj_weight"));
    EXPECT_TRUE(s.weight_formats().count("src_tok_emb.weight"));
    const auto src = ids(2 * 7, 17, 4), tgt = ids(2 * 6, 19, 5);
    EXPECT_LT(max_rel(s.logits(src, tgt, 2, 7, 6), sr.logits(src, tgt, 2, 7, 6)), 1e-5) << to_string(f);
    EXPECT_EQ(s.greedy(src, 2, 7, 1, 2, 6), sr.greedy(src, 2, 7, 1, 2, 6)) << to_string(f);

    Classifier c(cc, {}), cr(cc, {});
    scramble(c, 8);
    scramble(cr, 8);
    c.quantize(f);
    dequantize_in_place(cr, c.weight_formats());
    EXPECT_FALSE(c.weight_formats().count("tok_emb.weight"));  // not a head: float32 by default
    const auto x = ids(3 * 8, 21, 9);
    EXPECT_LT(max_rel(c.logits(x, 3, 8), cr.logits(x, 3, 8)), 1e-5) << to_string(f);
  }
}

TEST(Quantize, TrainingIsRefusedAndTheModelStaysUsable) {
  LanguageModel lm(lm_config(true), {});
  lm.quantize(WeightFormat::Int8);
  const auto x = ids(2 * 6, 23, 1), y = ids(2 * 6, 23, 2);
  const auto before = lm.logits(x, 2, 6);
  for (int call = 0; call < 3; ++call) {
    try {
      if (call == 0) lm.train_step(x, y, 2, 6);
      if (call == 1) lm.accumulate(x, y, 2, 6, 1.f);
      if (call == 2) lm.zero_grad();
      ADD_FAILURE() << "call " << call << " did not throw";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("quantized (int8"), std::string::npos) << what;
      EXPECT_NE(what.find("LoRA"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(lm.logits(x, 2, 6), before);
  EXPECT_EQ(lm.step(), 0);
}

TEST(Quantize, TwiceOrToAnUnknownFormatIsRefusedAndChangesNothing) {
  LanguageModel lm(lm_config(true), {});
  const auto x = ids(6, 23, 1);
  EXPECT_THROW(lm.quantize(WeightFormat::F32), Error);
  EXPECT_THROW(lm.quantize(static_cast<WeightFormat>(9)), Error);
  EXPECT_TRUE(lm.weight_formats().empty());
  lm.quantize(WeightFormat::Q4);
  const auto before = lm.logits(x, 1, 6);
  const size_t bytes = lm.memory().parameters;
  try {
    lm.quantize(WeightFormat::Int8);
    ADD_FAILURE() << "quantized twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized (q4)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lm.logits(x, 1, 6), before);
  EXPECT_EQ(lm.memory().parameters, bytes);
  try {
    weight_format_from_string("int3");
    ADD_FAILURE() << "int3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights = \"int3\""), std::string::npos) << e.what();
  }
  EXPECT_EQ(weight_format_from_string("bf16"), WeightFormat::BF16);
  // What quantize takes: the four packed formats, each refusal listing those four only.
  for (const char* bad : {"int3", "f32"}) {
    try {
      quantized_format_from_string(bad, "options.weights");
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find(std::string("options.weights = \"") + bad +
                                     "\" is not a quantized format: expected \"int8\", \"q4\", \"f16\" or \"bf16\""),
          std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(quantized_format_from_string("q4"), WeightFormat::Q4);
}

// Saved, loaded (whole, from a file, through the streaming loader): the same bytes when saved again, the same
// logits bit for bit, the same formats, and the memory of a packed model from the start.
TEST(Quantize, CheckpointsRoundTrip) {
  for (WeightFormat f : kFormats) {
    LanguageModel lm(lm_config(false), {});
    scramble(lm, 5);
    lm.quantize(f, {.embedding = true});
    const auto bytes = lm.save();
    const SafetensorsFile file = parse_safetensors(bytes);
    EXPECT_EQ(file.metadata.at("qkv.optimizer_state"), "false");
    const TensorEntry& in_proj = file.at("layers.0.self_attn.in_proj_weight");
    const auto of = static_cast<ops::WeightFormat>(f);
    const bool half = f == WeightFormat::F16 || f == WeightFormat::BF16;
    EXPECT_EQ(in_proj.dtype, f == WeightFormat::Int8              ? "I8"
                             : f == WeightFormat::Q4              ? "U8"
                             : to_string(f) == std::string("f16") ? "F16"
                                                                  : "BF16");
    EXPECT_EQ(in_proj.shape, (half ? std::vector<int64_t>{108, 36}
                                   : std::vector<int64_t>{108, static_cast<int64_t>(row_stride(of, 36))}));
    EXPECT_EQ(file.contains("layers.0.self_attn.in_proj_weight.scales"), !half);
    // linear2: K = d_ff = 38, 2K = 76 bytes is a multiple of 4: F16 / BF16 as such.
    const std::string path = ::testing::TempDir() + "/quantized_" + to_string(f) + ".safetensors";
    lm.save_file(path);
    const auto x = ids(2 * 7, 23, 6);
    const auto want = lm.logits(x, 2, 7);
    const auto loaded = loaded_every_way(bytes, path, 1000);
    for (const auto& m : loaded) {
      EXPECT_EQ(m->weight_formats(), lm.weight_formats()) << to_string(f);
      const auto again = m->save();  // before any forward pass: the pass count is saved too
      EXPECT_EQ(again, bytes) << to_string(f) << " loaded #" << (&m - loaded.data()) << " differs at byte "
                              << (std::mismatch(again.begin(), again.end(), bytes.begin()).first - again.begin());
      EXPECT_EQ(m->logits(x, 2, 7), want) << to_string(f);
      EXPECT_EQ(m->memory().parameters, lm.memory().parameters) << to_string(f);
    }
    // load_state into a model of the same formats works; into a float32 model it names the difference.
    LanguageModel same(lm_config(false), {});
    same.quantize(f, {.embedding = true});
    same.load_state(bytes);
    EXPECT_EQ(same.logits(x, 2, 7), want);
    LanguageModel fp32(lm_config(false), {});
    try {
      fp32.load_state(bytes);
      ADD_FAILURE() << "a quantized checkpoint loaded into a float32 model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("is ") + to_string(f) + " in the file but f32 in this model"),
                std::string::npos)
          << e.what();
    }
  }
}

// A file rewritten with one tensor changed and its checksums made to match (what a buggy writer would produce).
std::vector<uint8_t> rewritten(const std::vector<uint8_t>& bytes, const std::string& name,
                               const std::function<void(TensorEntry&)>& change) {
  SafetensorsFile file = parse_safetensors(bytes);
  for (TensorEntry& t : file.tensors)
    if (t.name == name) change(t);
  std::vector<TensorRef> refs;
  for (const TensorEntry& t : file.tensors) refs.emplace_back(t.name, t.shape, t.dtype, t.bytes);
  std::map<std::string, std::string> meta = file.metadata;
  meta["qkv.crc32"] = io::checksum_metadata(refs);
  return serialize_safetensors(refs, meta);
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    LanguageModel::load(bytes);
    ADD_FAILURE() << "loaded; expected an error with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Quantize, CorruptedOrMisShapedScalesAreRefusedNamingTheTensor) {
  LanguageModel lm(lm_config(true), {});
  lm.quantize(WeightFormat::Q4);
  const auto bytes = lm.save();
  const std::string scales = "layers.1.linear1.weight.scales";
  // Q4's scales are bfloat16 (BF16): a NaN (0x7fc0) as the third group's scale.
  expect_refused(rewritten(bytes, scales,
                           [](TensorEntry& t) {
                             const uint16_t nan = 0x7fc0;
                             std::memcpy(t.bytes.data() + 4, &nan, 2);
                           }),
                 "tensor \"" + scales + "\" is corrupted: scale [2] = nan");
  expect_refused(rewritten(bytes, scales,
                           [](TensorEntry& t) {
                             t.shape = {t.shape[1], t.shape[0]};
                           }),
                 "tensor \"" + scales + "\" has shape");
  expect_refused(rewritten(bytes, scales, [](TensorEntry& t) { t.dtype = "F16"; }),
                 "tensor \"" + scales + "\" has dtype F16, expected BF16");
  // A file from before the bfloat16 scales (F32, one per group): refused with the reason, not as a shape.
  expect_refused(rewritten(bytes, scales,
                           [](TensorEntry& t) {
                             t.dtype = "F32";
                             t.shape = {t.shape[0], t.shape[1] / 2};
                           }),
                 "tensor \"" + scales + "\" holds q4 scales as F32, as files did before q4 stored them as bfloat16");
  expect_refused(rewritten(bytes, "layers.0.linear2.weight", [](TensorEntry& t) { t.dtype = "I8"; }),
                 "tensor \"layers.0.linear2.weight\" has dtype I8, expected U8");
  // An int8 scale must be >= 0.
  LanguageModel i8(lm_config(true), {});
  i8.quantize(WeightFormat::Int8);
  expect_refused(rewritten(i8.save(), "tok_emb.weight.scales",
                           [](TensorEntry& t) {
                             const float negative = -1.f;
                             std::memcpy(t.bytes.data(), &negative, 4);
                           }),
                 "tensor \"tok_emb.weight.scales\" is corrupted: scale [0] = -1, expected a finite number >= 0");
}

// On another device the packed rows move with the model (Parameters::to), load there packed, and are quantized there
// to the same bytes (the rounding is the host's): the WebGPU executor through the loopback (ops/webgpu_loopback.h:
// its commands run on the CPU executor, so the logits agree to the last bit), and CUDA where there is a GPU.
void expect_same_on(Device device, WeightFormat f) {
  LanguageModel cpu(lm_config(false), {});
  scramble(cpu, 12);
  const auto fp32 = cpu.save(false);
  cpu.quantize(f, {.embedding = true});
  const auto bytes = cpu.save();
  auto loaded = LanguageModel::load(bytes);
  loaded->to(device);
  auto made_there = LanguageModel::load(fp32);
  made_there->to(device);
  made_there->quantize(f, {.embedding = true});
  const int B = 2, T = 9;
  const auto x = ids(B * T, 23, 8);
  SamplingOptions greedy;
  greedy.temperature = 0.f;
  greedy.max_new_tokens = 6;
  const std::vector<int32_t> prompt = {3, 1, 4};
  for (LanguageModel* m : {loaded.get(), made_there.get()}) {
    EXPECT_EQ(m->device(), device);
    EXPECT_EQ(m->save(), bytes) << to_string(f);
    const double tol = device == Device::WebGPU ? 0.0 : 1e-5;
    EXPECT_LE(max_rel(m->logits(x, B, T), cpu.logits(x, B, T)), tol) << to_string(f);
    EXPECT_EQ(m->generate(prompt, greedy), cpu.generate(prompt, greedy)) << to_string(f);
    EXPECT_EQ(m->memory().parameters, cpu.memory().parameters);
  }
  loaded->to(Device::CPU);  // and back
  EXPECT_EQ(loaded->logits(x, B, T), cpu.logits(x, B, T));
}

TEST(Quantize, OnWebGpuThePackedWeightsMoveLoadAndQuantizeThere) {
  test::webgpu_loopback();
  for (WeightFormat f : kFormats) expect_same_on(Device::WebGPU, f);
}

// GPU test: skipped where there is none (list it as unrun).
TEST(Quantize, OnCudaThePackedWeightsMoveLoadAndQuantizeThere) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  for (WeightFormat f : kFormats) expect_same_on(Device::CUDA, f);
}

// QuantizeOptions::activations = Int8 and Model::set_quant_activations (qkv/quantize.h): decoding's products with int8
// and q4 weights quantize their activations to int8 (kernels/cpu/gemm_quant_dot.h). The logits against the same
// quantized model with float32 activations (near, not equal, where decoding's few rows take the path; equal where a
// prefill's many rows do not), the setting through checkpoints (every way of loading), and the refusals.
std::unique_ptr<LanguageModel> quantized_with(WeightFormat f, bool tied, QuantActivations a) {
  auto lm = std::make_unique<LanguageModel>(lm_config(tied));
  scramble(*lm, 7);
  lm->quantize(f, {.embedding = true, .activations = a});
  return lm;
}

TEST(QuantActivations, DecodingMovesByTheActivationsRoundingAndPrefillNotAtAll) {
  for (WeightFormat f : {WeightFormat::Int8, WeightFormat::Q4})
    for (bool tied : {true, false}) {
      const auto i8 = quantized_with(f, tied, QuantActivations::Int8),
                 f32 = quantized_with(f, tied, QuantActivations::F32);
      EXPECT_EQ(i8->quant_activations(), QuantActivations::Int8);
      EXPECT_EQ(f32->quant_activations(), QuantActivations::F32);
      // 6 rows (a batch of one, up to 8 rows): the int8 path. Its error is the activations' rounding: about 0.5% of a
      // product through each of the 2 layers' 4 products and the head; 3% bounds it with room, and it is not 0.
      const auto x = ids(6, 23, 31);
      const double rel = max_rel(i8->logits(x, 1, 6), f32->logits(x, 1, 6));
      EXPECT_LT(rel, 3e-2) << to_string(f) << " tied " << tied;
      EXPECT_GT(rel, 1e-6) << to_string(f) << " tied " << tied << ": the int8 path was not taken";
      // 18 rows: the panels' fp32 product, bit for bit the float32 activations' result.
      const auto y = ids(18, 23, 32);
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
  const auto lm = quantized_with(WeightFormat::Q4, true, QuantActivations::Int8);
  const auto bytes = lm->save();
  EXPECT_EQ(parse_safetensors(bytes).metadata.at("qkv.activations"), "int8");
  EXPECT_EQ(parse_safetensors(quantized_with(WeightFormat::Q4, true, QuantActivations::F32)->save())
                .metadata.count("qkv.activations"),
            0u);
  const std::string path = ::testing::TempDir() + "/quant_activations.safetensors";
  lm->save_file(path);
  const auto x = ids(5, 23, 33);
  const auto want = lm->logits(x, 1, 5);
  const auto loaded = loaded_every_way(bytes, path, 999);
  for (const auto& m : loaded) {
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
  LanguageModel lm(lm_config(true), {});
  const auto x = ids(5, 23, 33);
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
  const auto q4 = quantized_with(WeightFormat::Q4, true, QuantActivations::Int8)->save();
  EXPECT_NE(test::message_of([&] {
              LanguageModel::load(with_metadata(q4, "qkv.activations", "int4"));
            }).find("\"qkv.activations\" = \"int4\" is invalid: expected \"int8\" or \"f32\""),
            std::string::npos);
  LanguageModel fp32(lm_config(true), {});
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
}  // namespace qkv::quantize_test
