// A Hub folder's F16 / BF16 matrices kept in half precision at load (PretrainedWeights::Keep, qkv/import.h): the
// model is, bit for bit, the float32 load quantized to the file's format (so its logits and greedy tokens are too, and
// PyTorch's), its weights take the half size, and no float32 copy of the matrices is ever allocated.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ops/backends.h"
#include "ops/counting_backend.h"
#include "ops/weight_format.h"
#include "parity/parity_util.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/pretrained_loader.h"
#include "qkv/safetensors.h"
#include "test_util.h"

namespace qkv::pretrained_keep_test {
namespace {

namespace fs = std::filesystem;
using test::message_of;

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

constexpr PretrainedWeights kKeep = PretrainedWeights::Keep;

std::string dir_of(const std::string& c) { return std::string(QKV_FIXTURES_DIR) + "/import/gpt2_" + c; }
std::string text_of(const std::string& path) {
  const auto b = io::read_file(path);
  return {b.begin(), b.end()};
}
SafetensorsFile io_of(const std::string& c) {
  return read_safetensors(std::string(QKV_FIXTURES_DIR) + "/import/gpt2_" + c + ".io.safetensors");
}

// The float32 load quantized to `f`: what the kept load must equal.
std::unique_ptr<LanguageModel> quantized(const std::string& dir, WeightFormat f) {
  auto m = load_pretrained(dir);
  m->quantize(f);
  return m;
}

// Two models hold the same weights in the same formats, bit for bit, and compute the same logits and greedy tokens.
// Both fresh: a checkpoint also records what a model ran (its passes).
void expect_same_model(LanguageModel& a, LanguageModel& b, const std::string& what) {
  EXPECT_EQ(a.weight_formats(), b.weight_formats()) << what;
  EXPECT_TRUE(a.save(false) == b.save(false)) << what << ": the checkpoints differ";
  EXPECT_EQ(a.memory().parameters, b.memory().parameters) << what;
  const int V = a.config().vocab_size, T = std::min(8, a.config().context);
  std::vector<int32_t> ids(2 * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % V);
  const auto la = a.logits(ids, 2, T), lb = b.logits(ids, 2, T);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << what << ": the logits differ";
  SamplingOptions o;
  o.max_new_tokens = 6;
  o.temperature = 0.f;
  EXPECT_EQ(a.generate({ids.begin(), ids.begin() + 3}, o), b.generate({ids.begin(), ids.begin() + 3}, o)) << what;
}

TEST(PretrainedKeep, HalfFoldersLoadAsTheFloat32LoadQuantizedToTheirFormat) {
  for (const auto& [c, f] : {std::pair{"f16", WeightFormat::F16}, std::pair{"bf16", WeightFormat::BF16}}) {
    SCOPED_TRACE(c);
    const auto kept = load_pretrained(dir_of(c), {}, Device::CPU, nullptr, kKeep);
    // Every Linear weight and the tied embedding, as quantize() packs them; positions, biases and norms float32.
    const auto formats = kept->weight_formats();
    ASSERT_EQ(formats.size(), 2u * 4 + 1);
    for (const auto& [name, format] : formats) EXPECT_EQ(format, f) << name;
    EXPECT_EQ(formats.count("tok_emb.weight"), 1u);
    EXPECT_EQ(formats.count("pos_emb.weight"), 0u);
    expect_same_model(*kept, *quantized(dir_of(c), f), c);
    // From the bytes too (the package's importPretrained), and through a loader in pieces (Conv1D rows and
    // elements split anywhere; the model built when the header has come).
    const std::string config = text_of(dir_of(c) + "/config.json");
    const auto file = io::read_file(dir_of(c) + "/model.safetensors");
    const auto bytes = load_pretrained(config, file, {}, Device::CPU, kKeep);
    expect_same_model(*bytes, *quantized(dir_of(c), f), std::string(c) + " from bytes");
    for (const size_t piece : {size_t{1}, size_t{7}, size_t{1000}}) {
      PretrainedLoader loader(config, std::nullopt, {}, kKeep);
      for (size_t at = 0; at < file.size();) {
        const auto to = loader.buffer();
        const size_t n = std::min({to.size(), piece, file.size() - at});
        std::memcpy(to.data(), file.data() + at, n);
        loader.commit(n);
        at += n;
      }
      const auto m = loader.finish();
      expect_same_model(*m, *quantized(dir_of(c), f), std::string(c) + " in pieces of " + std::to_string(piece));
    }
  }
}

// The kept model computes in float32 from the very weights PyTorch ran: its logits and greedy tokens.
TEST(PretrainedKeep, GivesPyTorchsLogitsAndGreedyTokens) {
  for (const std::string c : {"f16", "bf16"}) {
    SCOPED_TRACE(c);
    const auto f = io_of(c);
    const auto ids = test::ids(f, "input.ids");
    const int B = static_cast<int>(f.at("input.ids").shape[0]), T = static_cast<int>(f.at("input.ids").shape[1]);
    const auto m = load_pretrained(dir_of(c), {}, Device::CPU, nullptr, kKeep);
    test::expect_close("output.logits", m->logits(ids, B, T), f.floats("output.logits"), 1e-5);
    const auto prompt = test::ids(f, "input.prompt"), greedy = test::ids(f, "output.greedy");
    SamplingOptions o;
    o.max_new_tokens = static_cast<int>(greedy.size());
    o.temperature = 0.f;
    EXPECT_EQ(m->generate(prompt, o), greedy);
  }
}

TEST(PretrainedKeep, TheWeightsTakeTheHalfSize) {
  const auto f32 = load_pretrained(dir_of("f16"));
  const auto kept = load_pretrained(dir_of("f16"), {}, Device::CPU, nullptr, kKeep);
  // Each packed matrix: rows of 2 bytes per element (16 wide: no padding), 64-byte aligned, no scales.
  size_t matrices = 0, halves = 0;
  const auto formats = kept->weight_formats();
  for (const auto& p : f32->parameters())
    if (formats.count(p.name)) {
      matrices += (p.value.size() + 15) / 16 * 16 * sizeof(float);
      halves += (p.value.size() * 2 + 63) / 64 * 64;
    }
  ASSERT_GT(matrices, 0u);
  EXPECT_EQ(kept->memory().parameters, f32->memory().parameters - matrices + halves);
  EXPECT_LT(kept->memory().parameters, f32->memory().parameters * 6 / 10);
}

// The memory allocated through the device while loading: never more than the kept model holds when done, which is
// less than its float32 matrices alone (the float32 load's peak is its float32 weights: the counter counts).
TEST(PretrainedKeep, NoFloat32CopyOfTheMatricesIsAllocated) {
  ops::Backend& cpu = ops::backend(Device::CPU);
  ops::CountingBackend counting(cpu);
  ops::Backend* const before = ops::set_cpu_backend_for_tests(&counting);
  struct Restore {
    ops::Backend* b;
    ~Restore() { ops::set_cpu_backend_for_tests(b); }
  } restore{before};
  size_t f32_matrices = 0, f32_bytes = 0;
  {
    const auto f32 = load_pretrained(dir_of("bf16"));
    f32_bytes = f32->memory().parameters;
    EXPECT_EQ(counting.peak(), f32_bytes) << "the float32 load allocates its weights and nothing else";
    const auto formats = quantized(dir_of("bf16"), WeightFormat::BF16)->weight_formats();
    for (const auto& p : f32->parameters())
      if (formats.count(p.name)) f32_matrices += p.value.size() * sizeof(float);
  }
  for (const bool folder : {true, false}) {
    SCOPED_TRACE(folder ? "load_pretrained(dir)" : "PretrainedLoader");
    ASSERT_EQ(counting.live(), 0u);
    counting.reset_peak();
    const auto kept =
        folder ? load_pretrained(dir_of("bf16"), {}, Device::CPU, nullptr, kKeep)
               : load_pretrained(text_of(dir_of("bf16") + "/config.json"),
                                 io::read_file(dir_of("bf16") + "/model.safetensors"), {}, Device::CPU, kKeep);
    EXPECT_EQ(counting.peak(), kept->memory().parameters);
    EXPECT_EQ(counting.live(), kept->memory().parameters);
    EXPECT_LT(counting.peak(), f32_matrices);
    EXPECT_LT(counting.peak(), f32_bytes * 6 / 10);
  }
}

// A Hub-layout GPT-2 file written here in F16 with an odd width (15: rows padded to 4 bytes, so no matrix reads
// straight into place), and a lm_head present: kept, it is still the float32 load quantized.
TEST(PretrainedKeep, OddWidthsPadTheRowsAsQuantizeDoes) {
  const int C = 15, H = 3, F = 4 * C, V = 23, P = 9, L = 2;
  const fs::path dir = fs::path(testing::TempDir()) / "qkv_keep_odd";
  fs::create_directories(dir);
  {
    nlohmann::json c = {{"model_type", "gpt2"}, {"n_embd", C},      {"n_head", H},
                        {"n_layer", L},         {"n_positions", P}, {"vocab_size", V}};
    std::ofstream(dir / "config.json") << c.dump();
  }
  std::vector<std::vector<uint8_t>> store;
  std::vector<TensorRef> refs;
  uint64_t seed = 1;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, const std::string& dtype) {
    size_t n = 1;
    for (const int64_t d : shape) n *= static_cast<size_t>(d);
    const auto v = test::randn(n, seed++, 0.3f);
    std::vector<uint8_t> b(2 * n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = dtype == "F16" ? ops::f32_to_f16(v[i] + mean) : ops::f32_to_bf16(v[i] + mean);
      b[2 * i] = static_cast<uint8_t>(h & 0xff), b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
    store.push_back(std::move(b));
    refs.emplace_back(name, std::move(shape), dtype, std::span<const uint8_t>(store.back()));
  };
  store.reserve(64);
  for (const std::string dtype : {"F16", "BF16"}) {
    SCOPED_TRACE(dtype);
    store.clear(), refs.clear();
    add("transformer.wte.weight", {V, C}, 0.f, dtype);
    add("transformer.wpe.weight", {P, C}, 0.f, dtype);
    for (int l = 0; l < L; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      add(h + "ln_1.weight", {C}, 1.f, dtype), add(h + "ln_1.bias", {C}, 0.f, dtype);
      add(h + "attn.c_attn.weight", {C, 3 * C}, 0.f, dtype), add(h + "attn.c_attn.bias", {3 * C}, 0.f, dtype);
      add(h + "attn.c_proj.weight", {C, C}, 0.f, dtype), add(h + "attn.c_proj.bias", {C}, 0.f, dtype);
      add(h + "ln_2.weight", {C}, 1.f, dtype), add(h + "ln_2.bias", {C}, 0.f, dtype);
      add(h + "mlp.c_fc.weight", {C, F}, 0.f, dtype), add(h + "mlp.c_fc.bias", {F}, 0.f, dtype);
      add(h + "mlp.c_proj.weight", {F, C}, 0.f, dtype), add(h + "mlp.c_proj.bias", {C}, 0.f, dtype);
    }
    add("transformer.ln_f.weight", {C}, 1.f, dtype), add("transformer.ln_f.bias", {C}, 0.f, dtype);
    refs.emplace_back("lm_head.weight", std::vector<int64_t>{V, C}, dtype, std::span<const uint8_t>(store[0]));
    write_safetensors_atomic((dir / "model.safetensors").string(), serialize_safetensors(refs, {}));
    const auto f = dtype == "F16" ? WeightFormat::F16 : WeightFormat::BF16;
    const auto kept = load_pretrained(dir.string(), {}, Device::CPU, nullptr, kKeep);
    EXPECT_EQ(kept->weight_formats().size(), 2u * 4 + 1);
    expect_same_model(*kept, *quantized(dir.string(), f), dtype);
  }
  fs::remove_all(dir);
}

// Sharded (model.safetensors.index.json and two shards of the f16 fixture): kept as one file is, from the folder and
// through a loader given the shards' headers first.
TEST(PretrainedKeep, ShardsAreKeptAsOneFileIs) {
  const fs::path dir = fs::path(testing::TempDir()) / "qkv_keep_shards";
  fs::create_directories(dir);
  fs::copy_file(fs::path(dir_of("f16")) / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  const auto file = read_safetensors(dir_of("f16") + "/model.safetensors");
  std::vector<TensorRef> parts[2];
  nlohmann::json map;
  const std::string names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  for (const auto& t : file.tensors) {
    const int s = t.name.rfind("h.1.", 0) == 0 ? 1 : 0;
    parts[s].emplace_back(t.name, t.shape, t.dtype, std::span<const uint8_t>(t.bytes));
    map[t.name] = names[s];
  }
  std::vector<uint8_t> bytes[2];
  for (int s = 0; s < 2; ++s) {
    bytes[s] = serialize_safetensors(parts[s], {{"format", "pt"}});
    write_safetensors_atomic((dir / names[s]).string(), bytes[s]);
  }
  const std::string index = nlohmann::json{{"weight_map", map}}.dump();
  std::ofstream(dir / "model.safetensors.index.json") << index;
  const auto folder = load_pretrained(dir.string(), {}, Device::CPU, nullptr, kKeep);
  expect_same_model(*folder, *quantized(dir_of("f16"), WeightFormat::F16), "sharded folder");
  std::vector<PretrainedShard> heads;
  for (int s = 0; s < 2; ++s) heads.push_back({names[s], bytes[s]});
  PretrainedLoader loader(text_of(dir_of("f16") + "/config.json"), index, heads, {}, kKeep);
  for (int s = 0; s < 2; ++s) loader.push(bytes[s]);
  const auto streamed = loader.finish();
  expect_same_model(*streamed, *quantized(dir_of("f16"), WeightFormat::F16), "sharded loader");
  fs::remove_all(dir);
}

// What is not half precision stays float32: a float32 file loads as with F32 (and trains); a tied head of another
// dtype than its embedding leaves the embedding float32 (its values are compared, not written twice).
TEST(PretrainedKeep, Float32TensorsStayFloat32) {
  const auto kept = load_pretrained(dir_of("hub"), {}, Device::CPU, nullptr, kKeep);
  EXPECT_TRUE(kept->weight_formats().empty());
  const auto f32 = load_pretrained(dir_of("hub"));
  EXPECT_TRUE(kept->save(false) == f32->save(false));
  const auto ids = std::vector<int32_t>{1, 2, 3, 4};
  EXPECT_NO_THROW(kept->train_step(ids, ids, 1, 4));

  // bf16 with lm_head.weight rewritten as F32 (the same values): the embedding stays float32, the rest is kept.
  const auto file = read_safetensors(dir_of("bf16") + "/model.safetensors");
  std::vector<std::vector<float>> floats;
  floats.reserve(file.tensors.size());
  std::vector<TensorRef> refs;
  for (const auto& t : file.tensors) {
    if (t.name == "lm_head.weight") {
      floats.push_back(file.floats(t.name));
      refs.emplace_back(t.name, t.shape, std::span<const float>(floats.back()));
    } else {
      refs.emplace_back(t.name, t.shape, t.dtype, std::span<const uint8_t>(t.bytes));
    }
  }
  const auto mixed = serialize_safetensors(refs, {});
  const auto m = load_pretrained(text_of(dir_of("bf16") + "/config.json"), mixed, {}, Device::CPU, kKeep);
  const auto formats = m->weight_formats();
  EXPECT_EQ(formats.size(), 2u * 4);
  EXPECT_EQ(formats.count("tok_emb.weight"), 0u);
  // The same values as the all-BF16 file's kept model (whose embedding is packed) computes.
  const auto all = load_pretrained(dir_of("bf16"), {}, Device::CPU, nullptr, kKeep);
  const auto a = m->logits(ids, 1, 4), b = all->logits(ids, 1, 4);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// The checks are the float32 load's: a tied head that differs from its embedding is refused, kept or not, in either
// order (the bf16 fixture has lm_head.weight first: it is written into the packed embedding, wte compared with it).
TEST(PretrainedKeep, ATiedHeadThatDiffersIsRefused) {
  const auto file = read_safetensors(dir_of("bf16") + "/model.safetensors");
  for (const bool head_first : {true, false}) {
    std::vector<uint8_t> head;
    std::vector<TensorRef> front, back;
    for (const auto& t : file.tensors) {
      auto& to = (t.name == (head_first ? "lm_head.weight" : "transformer.wte.weight")) ? front : back;
      if (t.name == "lm_head.weight") {
        head = t.bytes;
        head[2 * 37 + 1] ^= 0x01;  // one element's exponent changed
        to.emplace_back(t.name, t.shape, t.dtype, std::span<const uint8_t>(head));
      } else {
        to.emplace_back(t.name, t.shape, t.dtype, std::span<const uint8_t>(t.bytes));
      }
    }
    front.insert(front.end(), back.begin(), back.end());
    const auto bytes = serialize_safetensors(front, {});
    EXPECT_HAS(
        message_of([&] { load_pretrained(text_of(dir_of("bf16") + "/config.json"), bytes, {}, Device::CPU, kKeep); }),
        "tensor \"lm_head.weight\" differs from \"transformer.wte.weight\"");
  }
}

// Inference only, as any quantized model: training and quantizing again are refused, the model still usable.
TEST(PretrainedKeep, AKeptModelIsForInferenceAndSaysWhy) {
  const auto m = load_pretrained(dir_of("f16"), {}, Device::CPU, nullptr, kKeep);
  const std::vector<int32_t> ids{1, 2, 3, 4};
  EXPECT_HAS(message_of([&] { m->train_step(ids, ids, 1, 4); }), "add_lora");
  EXPECT_HAS(message_of([&] { m->quantize(WeightFormat::Int8); }), "already quantized");
  EXPECT_EQ(m->logits(ids, 1, 4).size(), 4u * m->config().vocab_size);
  EXPECT_EQ(pretrained_weights_from_string("keep"), kKeep);
  EXPECT_EQ(pretrained_weights_from_string("f32"), PretrainedWeights::F32);
  const std::string bad = message_of([] { pretrained_weights_from_string("fp16", "--weights"); });
  EXPECT_HAS(bad, "--weights = \"fp16\"");
  EXPECT_HAS(bad, "\"keep\"");
}

// On the GPU: load_pretrained(dir, {}, Device::CUDA, nullptr, Keep) moves the packed rows there (nothing float32 is
// made on the way); the logits are the CPU's within 1e-5 and the greedy tokens PyTorch's.
TEST(PretrainedKeepCuda, TheKeptModelRunsOnTheGpu) {
  QKV_SKIP_WITHOUT_CUDA();
  for (const std::string c : {"f16", "bf16"}) {
    SCOPED_TRACE(c);
    const auto cpu = load_pretrained(dir_of(c), {}, Device::CPU, nullptr, kKeep);
    const auto gpu = load_pretrained(dir_of(c), {}, Device::CUDA, nullptr, kKeep);
    ASSERT_EQ(gpu->device(), Device::CUDA);
    EXPECT_EQ(gpu->weight_formats(), cpu->weight_formats());
    EXPECT_EQ(gpu->memory().parameters, cpu->memory().parameters);
    const auto f = io_of(c);
    const auto ids = test::ids(f, "input.ids");
    const int B = static_cast<int>(f.at("input.ids").shape[0]), T = static_cast<int>(f.at("input.ids").shape[1]);
    test::expect_close("logits on cuda", gpu->logits(ids, B, T), cpu->logits(ids, B, T), 1e-5);
    const auto prompt = test::ids(f, "input.prompt"), greedy = test::ids(f, "output.greedy");
    SamplingOptions o;
    o.max_new_tokens = static_cast<int>(greedy.size());
    o.temperature = 0.f;
    EXPECT_EQ(gpu->generate(prompt, o), greedy);
  }
}

}  // namespace
}  // namespace qkv::pretrained_keep_test
