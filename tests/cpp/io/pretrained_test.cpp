// Hub folders (qkv/import.h: import_pretrained): what is read from where, and every refusal, each named
// (parity with PyTorch is in parity/gpt2_parity_test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/tokenizer.h"
#include "test_util.h"

namespace qkv::pretrained_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::message_of;

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

std::string dir_of(const std::string& c) { return std::string(QKV_FIXTURES_DIR) + "/import/gpt2_" + c; }
std::string text_of(const fs::path& p) {
  const auto b = io::read_file(p.string());
  return {b.begin(), b.end()};
}
void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
void write(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A fresh empty folder under the system's temporary directory, removed when the test ends.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("qkv_pretrained_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The case's model.safetensors with its tensors edited: `edit` gets each name and its float values and shape,
// and returns false to drop it.
using Edit = std::function<bool(const std::string&, std::vector<float>&, std::vector<int64_t>&)>;
std::vector<uint8_t> edited(const std::string& c, const Edit& edit) {
  const auto f = read_safetensors(dir_of(c) + "/model.safetensors");
  std::vector<TensorRef> refs;
  std::vector<std::vector<float>> keep;
  std::vector<std::vector<int64_t>> shapes;
  keep.reserve(f.tensors.size());
  shapes.reserve(f.tensors.size());
  for (const auto& t : f.tensors) {
    keep.push_back(f.floats(t.name));
    shapes.push_back(t.shape);
    if (!edit(t.name, keep.back(), shapes.back())) continue;
    refs.emplace_back(t.name, shapes.back(), std::span<const float>(keep.back()));
  }
  return serialize_safetensors(refs, {});
}
std::string config_with(const std::string& c, const std::string& key, const json& value) {
  json j = json::parse(text_of(fs::path(dir_of(c)) / "config.json"));
  if (value.is_discarded())
    j.erase(key);
  else
    j[key] = value;
  return j.dump();
}
std::vector<uint8_t> weights_of(const std::string& c) { return io::read_file(dir_of(c) + "/model.safetensors"); }

TEST(Pretrained, DetectsGpt2InBothLayoutsAndNanoGptStill) {
  EXPECT_EQ(detect_format(weights_of("hub")), "gpt2");
  EXPECT_EQ(detect_format(weights_of("lmhead")), "gpt2");
  EXPECT_EQ(detect_format(weights_of("bf16")), "gpt2");
  // nanoGPT has the same names under "transformer.", but nn.Linear's c_attn (3C, C).
  for (const char* c : {"nanogpt_bias", "nanogpt_nobias"})
    EXPECT_EQ(detect_format(io::read_file(std::string(QKV_FIXTURES_DIR) + "/import/" + c + ".safetensors")), "nanogpt");
}

TEST(Pretrained, AnArchitectureQkvDoesNotRunIsRefusedByModelType) {
  const auto w = weights_of("gelu");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "model_type", "llama"), w); }),
             "config.json: model_type \"llama\" is an architecture qkv does not run");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "model_type", json::value_t::discarded), w); }),
             "\"model_type\" is missing");
  // In a folder, before the weights are read (there are none here), with the folder's path first.
  TempDir d("llama");
  write(d.path / "config.json", config_with("gelu", "model_type", "llama"));
  const std::string e = message_of([&] { import_pretrained(d.path.string()); });
  EXPECT_EQ(e.rfind(d.path.string() + ": config.json: model_type \"llama\"", 0), 0u) << e;
}

TEST(Pretrained, ConfigFieldsQkvCannotHonourAreRefusedByName) {
  const auto w = weights_of("gelu");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "activation_function", "swish"), w); }),
             "activation_function \"swish\" is not one qkv runs");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "layer_norm_epsilon", 1e-6), w); }),
             "layer_norm_epsilon 1e-06 is not one qkv's LayerNorm honours: it uses 1e-5");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "n_layer", json::value_t::discarded), w); }),
             "\"n_layer\" is missing");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "n_head", 3), w); }),
             "n_embd 16 is not divisible by n_head 3");
  EXPECT_HAS(message_of([&] { import_pretrained(config_with("gelu", "scale_attn_by_inverse_layer_idx", true), w); }),
             "\"scale_attn_by_inverse_layer_idx\" is true");
  EXPECT_HAS(message_of([&] { import_pretrained("{", w); }), "config.json is not valid JSON");
  // n_ctx stands in for n_positions in old configs.
  json old = json::parse(config_with("gelu", "n_positions", json::value_t::discarded));
  EXPECT_EQ(json::parse(import_pretrained(old.dump(), w).config_json).at("context"), 16);
}

// Every missing and mis-shaped tensor at once, in the file's own names (the "transformer." prefix included
// for a tensor that is missing from a GPT2LMHeadModel file).
TEST(Pretrained, EveryMissingAndMisshapedTensorIsNamedAtOnce) {
  const auto bytes = edited("lmhead", [](const std::string& n, std::vector<float>&, std::vector<int64_t>& shape) {
    if (n == "transformer.h.1.mlp.c_fc.weight" || n == "transformer.ln_f.bias") return false;
    if (n == "transformer.h.0.attn.c_attn.weight") std::swap(shape[0], shape[1]);  // nanoGPT's (3C, C)
    return true;
  });
  const std::string e =
      message_of([&] { import_pretrained(text_of(fs::path(dir_of("lmhead")) / "config.json"), bytes); });
  EXPECT_HAS(e, "tensor \"transformer.h.1.mlp.c_fc.weight\" is missing");
  EXPECT_HAS(e, "tensor \"transformer.ln_f.bias\" is missing");
  EXPECT_HAS(e, "tensor \"transformer.h.0.attn.c_attn.weight\" has shape (48, 16), expected (16, 48)");
  // A config.json of another shape than the weights: every tensor that differs is named.
  const std::string wide =
      message_of([&] { import_pretrained(config_with("gelu", "n_inner", 32), weights_of("gelu")); });
  EXPECT_HAS(wide, "tensor \"h.0.mlp.c_fc.weight\" has shape (16, 24), expected (16, 32)");
  EXPECT_HAS(wide, "tensor \"h.1.mlp.c_proj.weight\" has shape (24, 16), expected (32, 16)");
}

// A config.json of far more layers than the file: the first problems, then how many more (a mistyped n_layer would
// otherwise make a message naming every tensor of every missing layer).
TEST(Pretrained, ManyProblemsAreCountedPastTheFirstForty) {
  const std::string e = message_of([&] { import_pretrained(config_with("gelu", "n_layer", 200), weights_of("gelu")); });
  EXPECT_HAS(e, "tensor \"h.2.ln_1.weight\" is missing");
  // Layers 2 .. 199 lack their 12 tensors each: 40 named, the rest counted.
  EXPECT_HAS(e, "; and 2336 more (2376 in all)");
  EXPECT_LT(e.size(), 4000u) << e.size();
}

TEST(Pretrained, AHeadThatIsNotTheEmbeddingIsRefused) {
  const auto bytes = edited("lmhead", [](const std::string& n, std::vector<float>& v, std::vector<int64_t>&) {
    if (n == "lm_head.weight") v[5] += 0.5f;
    return true;
  });
  EXPECT_HAS(message_of([&] { import_pretrained(text_of(fs::path(dir_of("lmhead")) / "config.json"), bytes); }),
             "tensor \"lm_head.weight\" differs from \"transformer.wte.weight\": GPT-2 ties its head");
}

TEST(Pretrained, BuffersAreCheckedBeforeTheyAreIgnored) {
  const auto bytes = edited("hub", [](const std::string& n, std::vector<float>& v, std::vector<int64_t>&) {
    if (n == "h.1.attn.bias") v[1] = 1.f;  // row 0 sees position 1: not causal
    if (n == "h.0.attn.masked_bias") v[0] = 5.f;
    return true;
  });
  const std::string e = message_of([&] { import_pretrained(text_of(fs::path(dir_of("hub")) / "config.json"), bytes); });
  EXPECT_HAS(e, "tensor \"h.1.attn.bias\" (F32 (1, 1, 16, 16)) is not GPT-2's causal mask");
  EXPECT_HAS(e, "tensor \"h.0.attn.masked_bias\" (F32 ()) is not GPT-2's masked_bias");
}

TEST(Pretrained, ATruncatedFileIsRefused) {
  auto w = weights_of("hub");
  w.erase(w.end() - 100, w.end());
  const std::string config = text_of(fs::path(dir_of("hub")) / "config.json");
  EXPECT_HAS(message_of([&] { import_pretrained(config, w); }), "truncated file?");
  TempDir d("truncated");
  write(d.path / "config.json", config);
  write(d.path / "model.safetensors", w);
  const std::string e = message_of([&] { import_pretrained(d.path.string()); });
  EXPECT_HAS(e, (d.path / "model.safetensors").string());
  EXPECT_HAS(e, "truncated file?");
}

// A folder with only pytorch_model.bin (torch.save's zip): the line that converts it.
TEST(Pretrained, APickleAloneIsRefusedWithTheConversionLine) {
  TempDir d("pickle");
  write(d.path / "config.json", text_of(fs::path(dir_of("hub")) / "config.json"));
  write(d.path / "pytorch_model.bin", std::vector<uint8_t>{'P', 'K', 3, 4, 20, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 2});
  const std::string e = message_of([&] { import_pretrained(d.path.string()); });
  EXPECT_HAS(e, "pytorch_model.bin (there is no model.safetensors): the file is a PyTorch pickle");
  EXPECT_HAS(e, "safetensors.torch.save_file(model.state_dict(), \"model.safetensors\")");
  fs::remove(d.path / "pytorch_model.bin");
  EXPECT_HAS(message_of([&] { import_pretrained(d.path.string()); }), "there is no model.safetensors");
  fs::remove(d.path / "config.json");
  EXPECT_HAS(message_of([&] { import_pretrained(d.path.string()); }), "there is no config.json");
  EXPECT_HAS(message_of([&] { import_pretrained((d.path / "nothing").string()); }), "not a folder");
}

// model.safetensors.index.json and its shards load as the single file does; a tensor the index places in a
// shard that lacks it is named.
TEST(Pretrained, ShardedWeightsLoadAsOneFile) {
  TempDir d("sharded");
  write(d.path / "config.json", text_of(fs::path(dir_of("hub")) / "config.json"));
  const auto f = read_safetensors(dir_of("hub") + "/model.safetensors");
  std::vector<std::vector<float>> keep;
  keep.reserve(f.tensors.size());
  std::vector<TensorRef> parts[2];
  json map;
  for (const auto& t : f.tensors) {
    const int s = t.name.rfind("h.1.", 0) == 0 ? 1 : 0;
    keep.push_back(f.floats(t.name));
    parts[s].emplace_back(t.name, t.shape, std::span<const float>(keep.back()));
    map[t.name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s)
    write(d.path / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"),
          serialize_safetensors(parts[s], {{"format", "pt"}}));
  write(d.path / "model.safetensors.index.json", json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  const auto sharded = import_pretrained(d.path.string());
  const auto single = import_pretrained(dir_of("hub"));
  EXPECT_EQ(sharded.weights, single.weights);
  map["wte.weight"] = "model-00002-of-00002.safetensors";
  write(d.path / "model.safetensors.index.json", json{{"weight_map", map}}.dump());
  EXPECT_HAS(message_of([&] { import_pretrained(d.path.string()); }),
             "tensor \"wte.weight\" is not in model-00002-of-00002.safetensors");
}

// The tokenizer files beside the weights come with the result, as text, for a tokenizer to be built from.
TEST(Pretrained, CarriesTheTokenizerFilesFound) {
  TempDir d("tokenizer");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(dir_of("gelu")) / f, d.path / f);
  write(d.path / "vocab.json", std::string("{\"a\": 0, \"b\": 1}"));
  write(d.path / "merges.txt", std::string("#version: 0.2\na b\n"));
  const auto r = import_pretrained(d.path.string());
  ASSERT_EQ(r.tokenizer_files.size(), 2u);
  EXPECT_EQ(r.tokenizer_files.at("vocab.json"), "{\"a\": 0, \"b\": 1}");
  EXPECT_EQ(r.tokenizer_files.at("merges.txt"), "#version: 0.2\na b\n");
  EXPECT_TRUE(import_pretrained(dir_of("gelu")).tokenizer_files.empty());
}

// load_state takes a bare GPT-2 file too: its shapes fix the config's sizes (not the activation: config.json
// says that), checked against the model's.
TEST(Pretrained, LoadStateTakesAHubFile) {
  const auto r = import_pretrained(dir_of("gelu"));
  LanguageModel m(language_model_config_from_json(r.config_json));
  m.load_state(weights_of("gelu"));
  LanguageModel via(language_model_config_from_json(r.config_json));
  via.load_weights(r.weights);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  EXPECT_EQ(m.logits(ids, 1, 5), via.logits(ids, 1, 5));
  // load() cannot build the model from the file alone (no heads, no activation): it says how the folder loads.
  EXPECT_HAS(message_of([&] { LanguageModel::load(weights_of("gelu")); }),
             "a Hugging Face folder (config.json + model.safetensors) loads whole with load_pretrained");
  auto c = language_model_config_from_json(r.config_json);
  c.d_ff = 32;
  LanguageModel other(c);
  EXPECT_HAS(message_of([&] { other.load_state(weights_of("gelu")); }),
             "config field \"d_ff\" is 24 in the checkpoint");
}

// --- the folder's tokenizer (pretrained_tokenizer) ---------------------------------------------------------

// gpt2_tok holds the BPE fixture's tokenizer.json (tests/fixtures/bpe: GPT-2's first 400 merges); its io file
// holds a text of bpe/cases.json with the ids Hugging Face's tokenizer gives it ("prompt_text", input.prompt),
// and the text of the greedy ids as the fixture script's GPT-2 byte decoder wrote it ("greedy_text").
std::string bpe_file(const char* f) { return std::string(QKV_FIXTURES_DIR) + "/bpe/" + f; }
SafetensorsFile tok_io() { return read_safetensors(dir_of("tok") + ".io.safetensors"); }
std::vector<int32_t> ids_of(const SafetensorsFile& f, const std::string& name) {
  const auto v = f.ints(name);
  return {v.begin(), v.end()};
}

TEST(Pretrained, TheFoldersTokenizerJsonEncodesHuggingFacesIds) {
  const auto io = tok_io();
  const auto tok = pretrained_tokenizer(dir_of("tok"));
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->size(), 657);  // ids 0..655 and <|endoftext|> = 656: config.json's vocab_size
  const std::string text = io.metadata.at("prompt_text");
  ASSERT_EQ(text, "Hello world! The quick brown fox jumps over the lazy dog.");
  const auto want = ids_of(io, "input.prompt");
  ASSERT_EQ(want.size(), 30u);
  EXPECT_EQ(tok->encode(text), want);
  EXPECT_EQ(tok->decode(want), text);
  // The greedy ids include partial UTF-8 (the bytes E2 80) and a control byte: decoded as Hugging Face does.
  EXPECT_EQ(tok->decode(ids_of(io, "output.greedy")), io.metadata.at("greedy_text"));
  // The files' overload (what qkv import reads from import_pretrained's tokenizer_files) gives the same.
  const auto r = import_pretrained(dir_of("tok"));
  ASSERT_EQ(r.tokenizer_files.count("tokenizer.json"), 1u);
  const auto from_files = pretrained_tokenizer(r.tokenizer_files);
  ASSERT_TRUE(from_files.has_value());
  EXPECT_EQ(from_files->encode(text), want);
}

TEST(Pretrained, VocabAndMergesGiveTheSameIdsAsTokenizerJson) {
  const auto io = tok_io();
  const std::string text = io.metadata.at("prompt_text");
  TempDir d("vocab_merges");
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(bpe_file(f), d.path / f);
  const auto tok = pretrained_tokenizer(d.path.string());
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->size(), 657);
  EXPECT_EQ(tok->encode(text), ids_of(io, "input.prompt"));
  EXPECT_EQ(tok->decode(ids_of(io, "output.greedy")), io.metadata.at("greedy_text"));
  // Every text of the BPE fixture (base configuration) encodes alike through both files.
  const auto json_tok = pretrained_tokenizer(dir_of("tok"));
  ASSERT_TRUE(json_tok.has_value());
  const json cases = json::parse(text_of(bpe_file("cases.json")));
  int n = 0;
  for (const auto& c : cases.at("encode")) {
    if (c.at("config") != "base") continue;
    const std::string t = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(t), want) << t;
    EXPECT_EQ(json_tok->encode(t), want) << t;
    ++n;
  }
  EXPECT_GE(n, 20);
  // With all three files, tokenizer.json is the one read: a broken merges.txt beside it does not matter.
  fs::copy_file(bpe_file("tokenizer.json"), d.path / "tokenizer.json");
  write(d.path / "merges.txt", std::string("#version: 0.2\nnot-a-pair\n"));
  EXPECT_EQ(pretrained_tokenizer(d.path.string())->encode(text), ids_of(io, "input.prompt"));
}

TEST(Pretrained, HalfOfTheOlderTokenizerIsRefusedNamingBothFiles) {
  for (const char* has : {"vocab.json", "merges.txt"}) {
    TempDir d(std::string("half_") + has);
    fs::copy_file(bpe_file(has), d.path / has);
    const std::string m = message_of([&] { pretrained_tokenizer(d.path.string()); });
    EXPECT_HAS(m, d.path.string());
    EXPECT_HAS(m, std::string("the folder has ") + has + " but not ");
    EXPECT_HAS(m, "vocab.json");
    EXPECT_HAS(m, "merges.txt");
    EXPECT_HAS(m, "tokenizer.json");
  }
  // The files' overload says the same, without a folder.
  EXPECT_HAS(message_of([] {
               pretrained_tokenizer(std::map<std::string, std::string>{{"vocab.json", "{}"}});
             }),
             "the folder has vocab.json but not merges.txt");
}

TEST(Pretrained, AFolderWithoutTokenizerFilesHasNone) {
  EXPECT_FALSE(pretrained_tokenizer(dir_of("gelu")).has_value());
  EXPECT_FALSE(pretrained_tokenizer(std::map<std::string, std::string>{}).has_value());
  // Files a tokenizer is not built from alone do not make one.
  EXPECT_FALSE(pretrained_tokenizer(std::map<std::string, std::string>{{"tokenizer_config.json", "{}"}}).has_value());
  // Not a folder at all: an error, not "no tokenizer".
  EXPECT_HAS(message_of([] { pretrained_tokenizer(dir_of("tok") + "/config.json"); }), "not a folder");
  EXPECT_HAS(message_of([] { pretrained_tokenizer(dir_of("no_such_case")); }), "not a folder");
}

TEST(Pretrained, AMalformedTokenizerJsonIsRefusedNamingItAndTheFolder) {
  TempDir d("bad_tokenizer_json");
  // Not JSON, truncated JSON, and JSON that is not a byte-level BPE: each named, with the folder.
  const std::string whole = text_of(bpe_file("tokenizer.json"));
  for (const std::string& bad : {std::string("{not json"), whole.substr(0, whole.size() / 2),
                                 std::string(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})")}) {
    write(d.path / "tokenizer.json", bad);
    const std::string m = message_of([&] { pretrained_tokenizer(d.path.string()); });
    EXPECT_EQ(m.rfind(d.path.string() + ": tokenizer.json: ", 0), 0u) << m;
  }
  // A broken tokenizer.json is not passed over for vocab.json + merges.txt beside it.
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(bpe_file(f), d.path / f);
  EXPECT_HAS(message_of([&] { pretrained_tokenizer(d.path.string()); }), "tokenizer.json: ");
  // A malformed vocab.json is named too.
  fs::remove(d.path / "tokenizer.json");
  write(d.path / "vocab.json", std::string("[1, 2]"));
  const std::string m = message_of([&] { pretrained_tokenizer(d.path.string()); });
  EXPECT_EQ(m.rfind(d.path.string() + ": vocab.json + merges.txt: ", 0), 0u) << m;
}

}  // namespace
}  // namespace qkv::pretrained_test
