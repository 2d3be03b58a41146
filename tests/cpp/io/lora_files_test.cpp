// Adapter files as PEFT has them (qkv/lora_files.h): the names, shapes and config keys PEFT writes (against a
// fixture written by tests/fixtures/make_peft_fixtures.py from PEFT's rules), round trips in both namings for the
// three model kinds, a PEFT adapter on a model imported from a GPT-2 folder against PyTorch's logits (1e-5 relative),
// and every refusal.
#include "qkv/lora_files.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/lora_cases.h"
#include "ops/webgpu_loopback.h"
#include "qkv/classifier.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::lora_files_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& f) { return std::string(QKV_FIXTURES_DIR) + "/" + f; }

LanguageModelConfig tiny_lm(bool tie = true) {
  return {.vocab_size = 11, .context = 8, .d_model = 8, .heads = 2, .layers = 2, .d_ff = 12, .tie_head = tie};
}
Seq2SeqConfig tiny_seq2seq() {
  return {.src_vocab = 9,
          .tgt_vocab = 7,
          .context = 8,
          .d_model = 8,
          .heads = 2,
          .encoder_layers = 1,
          .decoder_layers = 1,
          .d_ff = 12};
}
ClassifierConfig tiny_classifier() {
  return {.vocab_size = 9, .context = 8, .d_model = 8, .heads = 2, .layers = 1, .d_ff = 12, .classes = 3};
}

LoraOptions lora(std::vector<std::string> targets, int rank = 2, float alpha = 3.f, float dropout = 0.1f) {
  return test::lora_options(std::move(targets), rank, alpha, dropout, 5);
}

void randomize_adapters(Model& m, uint64_t seed) { test::randomize_adapters(m, seed, 0.5f); }

// name -> values of the model's adapter tensors.
std::map<std::string, std::vector<float>> adapters_of(Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (const ParameterView& p : m.lora_parameters()) out[p.name] = {p.value.begin(), p.value.end()};
  return out;
}

// name -> shape of a safetensors file's tensors.
std::map<std::string, std::vector<int64_t>> shapes_of(const std::vector<uint8_t>& bytes) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const TensorEntry& t : parse_safetensors(bytes).tensors) out[t.name] = t.shape;
  return out;
}

AdapterFiles read_dir(const std::string& dir) {
  const auto c = io::read_file(dir + "/adapter_config.json");
  return {std::string(c.begin(), c.end()), io::read_file(dir + "/adapter_model.safetensors")};
}

// --- names, shapes and config keys exactly PEFT's -----------------------------------------------------------------

TEST(LoraFiles, QkvNamesAndShapesOfEveryTarget) {
  LanguageModel m(tiny_lm(false));
  m.add_lora(lora({"q", "k", "v", "out", "up", "down", "head"}));
  const AdapterFiles f = save_adapter(m, AdapterNames::Qkv);
  std::map<std::string, std::vector<int64_t>> want;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "base_model.model.layers." + std::to_string(l) + ".";
    for (const char* q : {"in_proj_q", "in_proj_k", "in_proj_v", "out_proj"}) {
      want[p + "self_attn." + q + ".lora_A.weight"] = {2, 8};
      want[p + "self_attn." + q + ".lora_B.weight"] = {8, 2};
    }
    want[p + "linear1.lora_A.weight"] = {2, 8};
    want[p + "linear1.lora_B.weight"] = {12, 2};
    want[p + "linear2.lora_A.weight"] = {2, 12};
    want[p + "linear2.lora_B.weight"] = {8, 2};
  }
  want["base_model.model.lm_head.lora_A.weight"] = {2, 8};
  want["base_model.model.lm_head.lora_B.weight"] = {11, 2};
  EXPECT_EQ(shapes_of(f.safetensors), want);
  EXPECT_EQ(parse_safetensors(f.safetensors).metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  const json c = json::parse(f.config_json);
  EXPECT_EQ(c.at("target_modules"),
            json({"in_proj_k", "in_proj_q", "in_proj_v", "linear1", "linear2", "lm_head", "out_proj"}));
  EXPECT_EQ(c.at("fan_in_fan_out"), false);
  EXPECT_EQ(c.at("r"), 2);
  EXPECT_EQ(c.at("lora_alpha").dump(), "3");  // an integer, as PEFT's int field
  EXPECT_EQ(c.at("lora_dropout").dump(), "0.1");
  EXPECT_EQ(c.at("task_type"), "CAUSAL_LM");
}

TEST(LoraFiles, Gpt2NamesAreTheFixturesAndTheConfigIsPeftsByteForByte) {
  // The fixture is what PEFT writes for GPT2LMHeadModel with r=2 on c_attn, attn.c_proj, c_fc and mlp.c_proj:
  // loaded into the imported GPT-2 and saved again in GPT-2 names, the files are the same (config text and every
  // tensor's name, shape and bytes).
  const std::string dir = fixture("lora/gpt2_peft");
  std::unique_ptr<LanguageModel> m = load_pretrained(fixture("import/gpt2_hub"));
  load_adapter_dir(*m, dir);
  EXPECT_EQ(to_string(m->lora_options()), "rank=2,alpha=4,dropout=0.05,targets=qkv+out+up+down,seed=0");
  const AdapterFiles want = read_dir(dir);
  const AdapterFiles got = save_adapter(*m, AdapterNames::Gpt2);
  EXPECT_EQ(got.config_json, want.config_json);
  const SafetensorsFile a = parse_safetensors(got.safetensors), b = parse_safetensors(want.safetensors);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const TensorEntry& t : b.tensors) {
    ASSERT_TRUE(a.contains(t.name)) << t.name;
    EXPECT_EQ(a.at(t.name).shape, t.shape) << t.name;
    EXPECT_EQ(a.at(t.name).bytes, t.bytes) << t.name;
  }
  EXPECT_EQ(a.metadata, b.metadata);
}

TEST(LoraFiles, PeftAdapterOnImportedGpt2GivesPyTorchsLogits) {
  std::unique_ptr<LanguageModel> m = load_pretrained(fixture("import/gpt2_hub"));
  load_adapter_dir(*m, fixture("lora/gpt2_peft"));
  const SafetensorsFile io = read_safetensors(fixture("lora/gpt2_peft.io.safetensors"));
  const std::vector<int64_t> ids64 = io.ints("input.ids");
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  const int B = static_cast<int>(io.at("input.ids").shape[0]), T = static_cast<int>(io.at("input.ids").shape[1]);
  m->set_training(false);
  const std::vector<float> got = m->logits(ids, B, T), want = io.floats("output.logits");
  ASSERT_EQ(got.size(), want.size());
  // Within 1e-5 relative: the largest difference over the largest |logit|, as the import parity tests measure.
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  std::printf("peft adapter on gpt2_hub: logits max relative difference %.2e (largest |logit| %.1f)\n", worst / scale,
              scale);
  EXPECT_LT(worst / scale, 1e-5);
  // And the adapter matters: the base alone is far from these logits.
  m->remove_lora();
  const std::vector<float> base = m->logits(ids, B, T);
  float moved = 0.f;
  for (size_t i = 0; i < got.size(); ++i) moved = std::max(moved, std::abs(base[i] - want[i]));
  EXPECT_GT(moved, 1e-2f);
}

// --- round trips --------------------------------------------------------------------------------------------------

template <class M, class C>
void round_trip(const C& config, const LoraOptions& o, AdapterNames names) {
  M a(config);
  test::randomize_weights(a, 3);
  a.add_lora(o);
  randomize_adapters(a, 40);
  const AdapterFiles f = save_adapter(a, names);
  M b(config);
  b.add_lora(lora({"out"}, 4));  // replaced by the file's
  load_adapter(b, f);
  EXPECT_EQ(to_string(b.lora_options()), to_string(LoraOptions{o.rank, o.alpha, o.dropout, o.targets, 5}));
  EXPECT_EQ(adapters_of(b), adapters_of(a));  // bit for bit
  EXPECT_EQ(save_adapter(b, names).safetensors, f.safetensors);
}

TEST(LoraFiles, RoundTripQkvNamesEveryKind) {
  round_trip<LanguageModel>(tiny_lm(), lora({"q", "k", "v", "out", "up", "down", "head"}), AdapterNames::Qkv);
  round_trip<LanguageModel>(tiny_lm(false), lora({"qkv", "head"}, 3, 6.f, 0.f), AdapterNames::Qkv);
  round_trip<Seq2Seq>(tiny_seq2seq(), lora({"qkv", "out", "up", "down", "head"}), AdapterNames::Qkv);
  round_trip<Classifier>(tiny_classifier(), lora({"v", "out", "head"}), AdapterNames::Qkv);
}

TEST(LoraFiles, RoundTripGpt2Names) {
  round_trip<LanguageModel>(tiny_lm(), lora({"qkv", "out", "up", "down", "head"}), AdapterNames::Gpt2);
  round_trip<LanguageModel>(tiny_lm(false), lora({"down"}, 1, 0.5f, 0.25f), AdapterNames::Gpt2);
}

TEST(LoraFiles, ClassifierHeadNames) {
  Classifier c(tiny_classifier());  // the MLP head: classifier.0 (C -> C/2) and classifier.3 (C/2 -> classes)
  c.add_lora(lora({"head"}));
  EXPECT_EQ(shapes_of(save_adapter(c, AdapterNames::Qkv).safetensors),
            (std::map<std::string, std::vector<int64_t>>{{"base_model.model.classifier.0.lora_A.weight", {2, 8}},
                                                         {"base_model.model.classifier.0.lora_B.weight", {4, 2}},
                                                         {"base_model.model.classifier.3.lora_A.weight", {2, 4}},
                                                         {"base_model.model.classifier.3.lora_B.weight", {3, 2}}}));
  EXPECT_TRUE(json::parse(save_adapter(c, AdapterNames::Qkv).config_json).at("task_type").is_null());
}

TEST(LoraFiles, DirRoundTripAndGpt2NamedLoadIntoAQkvModel) {
  const std::string dir = testing::TempDir() + "/qkv_lora_files_dir/nested";
  std::filesystem::remove_all(testing::TempDir() + "/qkv_lora_files_dir");
  LanguageModel a(tiny_lm());
  a.add_lora(lora({"qkv", "up"}));
  randomize_adapters(a, 9);
  save_adapter_dir(a, dir, AdapterNames::Gpt2, "gpt2");
  EXPECT_EQ(json::parse(read_dir(dir).config_json).at("base_model_name_or_path"), "gpt2");
  LanguageModel b(tiny_lm());
  load_adapter_dir(b, dir);
  EXPECT_EQ(adapters_of(b), adapters_of(a));
  std::filesystem::remove_all(testing::TempDir() + "/qkv_lora_files_dir");
}

// --- refusals -----------------------------------------------------------------------------------------------------

// The fixture's files with the config edited by `edit`.
AdapterFiles edited(const std::function<void(json&)>& edit) {
  AdapterFiles f = read_dir(fixture("lora/gpt2_peft"));
  json c = json::parse(f.config_json);
  edit(c);
  f.config_json = c.dump();
  return f;
}

TEST(LoraFiles, RefusesConfigKeysItCannotHonourNamingThem) {
  std::unique_ptr<LanguageModel> m = load_pretrained(fixture("import/gpt2_hub"));
  const auto refused = [&](const std::function<void(json&)>& edit, const std::string& part) {
    const std::string msg = test::message_of([&] { load_adapter(*m, edited(edit)); });
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_FALSE(m->has_lora()) << part;  // nothing changed
  };
  refused([](json& c) { c["peft_type"] = "PREFIX_TUNING"; }, "\"peft_type\" is \"PREFIX_TUNING\"");
  refused([](json& c) { c.erase("peft_type"); }, "no \"peft_type\"");
  refused([](json& c) { c["bias"] = "lora_only"; }, "\"bias\" is \"lora_only\"");
  refused([](json& c) { c["modules_to_save"] = {"lm_head"}; }, "\"modules_to_save\" is [\"lm_head\"]");
  refused([](json& c) { c["use_dora"] = true; }, "\"use_dora\" is true");
  refused([](json& c) { c["use_rslora"] = true; }, "\"use_rslora\" is true");
  refused([](json& c) { c["rank_pattern"] = {{"c_attn", 4}}; }, "\"rank_pattern\"");
  refused([](json& c) { c["alpha_pattern"] = {{"c_attn", 4}}; }, "\"alpha_pattern\"");
  refused([](json& c) { c["layers_to_transform"] = {0}; }, "\"layers_to_transform\" is [0]");
  refused([](json& c) { c["r"] = 0; }, "\"r\" is 0");
  refused([](json& c) { c["r"] = 2000000; }, "\"r\" is 2000000: expected an integer from 1 to 1048576");
  refused([](json& c) { c["lora_dropout"] = 1.5; }, "lora dropout = 1.5");
  refused([](json& c) { c["target_modules"].push_back("wte"); }, "target_modules entry \"wte\" names no module");
  refused([](json& c) { c["target_modules"] = 3; }, "\"target_modules\" is 3");
  const std::string msg = test::message_of([&] {
    AdapterFiles f = read_dir(fixture("lora/gpt2_peft"));
    f.config_json = "{\"peft_type\": ";
    load_adapter(*m, f);
  });
  EXPECT_NE(msg.find("adapter_config.json: not valid JSON"), std::string::npos) << msg;
  // The same target_modules as a regular expression is read as PEFT reads it (a full match).
  load_adapter(*m, edited([](json& c) { c["target_modules"] = R"(.*\.(c_attn|c_proj|c_fc))"; }));
  EXPECT_EQ(to_string(m->lora_options()), "rank=2,alpha=4,dropout=0.05,targets=qkv+out+up+down,seed=0");
}

TEST(LoraFiles, NamesEveryMissingMisShapedAndUnexpectedTensorAtOnce) {
  LanguageModel m(tiny_lm());
  m.add_lora(lora({"qkv", "out"}));
  const AdapterFiles f = save_adapter(m, AdapterNames::Gpt2);
  const SafetensorsFile file = parse_safetensors(f.safetensors);
  std::vector<TensorRef> refs;
  std::vector<float> wrong(3 * 8, 0.f), extra(4, 0.f);
  std::vector<std::vector<float>> values;
  for (const TensorEntry& t : file.tensors) values.push_back(file.floats(t.name));
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const TensorEntry& t = file.tensors[i];
    if (t.name == "base_model.model.transformer.h.1.attn.c_proj.lora_B.weight") continue;  // missing
    if (t.name == "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight") {
      refs.emplace_back(t.name, std::vector<int64_t>{3, 8}, std::span<const float>(wrong));  // r = 3, not 2
      continue;
    }
    refs.emplace_back(t.name, t.shape, std::span<const float>(values[i]));
  }
  refs.emplace_back("base_model.model.transformer.h.0.attn.c_attn.lora_embedding_A", std::vector<int64_t>{2, 2},
                    std::span<const float>(extra));
  LanguageModel target(tiny_lm());
  target.add_lora(lora({"up"}));
  randomize_adapters(target, 1);
  const auto before = adapters_of(target);
  const std::string msg = test::message_of([&] {
    load_adapter(target, {f.config_json, serialize_safetensors(refs, {{"format", "pt"}})});
  });
  for (const char* part :
       {"tensor \"base_model.model.transformer.h.1.attn.c_proj.lora_B.weight\" is missing",
        "tensor \"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight\" has shape (3, 8), expected (2, 8)",
        "tensor \"base_model.model.transformer.h.0.attn.c_attn.lora_embedding_A\" is not a LoRA tensor"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
  EXPECT_EQ(to_string(target.lora_options()), to_string(lora({"up"})));  // the model's adapters are as they were
  EXPECT_EQ(adapters_of(target), before);
}

// A model on WebGPU (the loopback: ops/webgpu_loopback.h) saves and loads its adapters where it is, through the
// executor's download and upload: the same files as on the CPU, and the same logits.
TEST(LoraFiles, OnWebGpuTheSameFiles) {
  test::webgpu_loopback();
  LanguageModel cpu(tiny_lm()), gpu(tiny_lm());
  for (LanguageModel* m : {&cpu, &gpu}) test::randomize_weights(*m, 3);
  const LoraOptions o = lora({"qkv", "out", "up", "down", "head"});
  cpu.add_lora(o);
  randomize_adapters(cpu, 40);
  const AdapterFiles f = save_adapter(cpu, AdapterNames::Gpt2);
  gpu.to(Device::WebGPU);
  gpu.add_lora(lora({"out"}, 4));  // replaced by the file's
  load_adapter(gpu, f);
  const AdapterFiles g = save_adapter(gpu, AdapterNames::Gpt2);
  EXPECT_EQ(g.safetensors, f.safetensors);
  EXPECT_EQ(g.config_json, f.config_json);
  const std::vector<int32_t> tokens{1, 5, 2, 7, 3, 0};
  EXPECT_EQ(gpu.logits(tokens, 1, 6), cpu.logits(tokens, 1, 6));  // the loopback's forward is the CPU's, bit for bit
}

TEST(LoraFiles, SaveRefusals) {
  LanguageModel m(tiny_lm());
  EXPECT_NE(test::message_of([&] { save_adapter(m, AdapterNames::Qkv); }).find("the model has no LoRA adapters"),
            std::string::npos);
  m.add_lora(lora({"q", "v"}));
  const std::string msg = test::message_of([&] { save_adapter(m, AdapterNames::Gpt2); });
  EXPECT_NE(msg.find("target \"q\" has no GPT-2 module"), std::string::npos) << msg;
  Seq2Seq s(tiny_seq2seq());
  s.add_lora(lora({"qkv"}));
  EXPECT_NE(test::message_of([&] { save_adapter(s, AdapterNames::Gpt2); }).find("GPT-2 names are a language model's"),
            std::string::npos);
  // A GPT-2-named adapter is a language model's: a seq2seq refuses it.
  LanguageModel lm(tiny_lm());
  lm.add_lora(lora({"qkv"}));
  const AdapterFiles f = save_adapter(lm, AdapterNames::Gpt2);
  EXPECT_NE(test::message_of([&] { load_adapter(s, f); }).find("this model is not one"), std::string::npos);
  const std::string missing = test::message_of([&] { load_adapter_dir(lm, testing::TempDir() + "/no_such_adapter"); });
  EXPECT_NE(missing.find("not a folder"), std::string::npos) << missing;
}

}  // namespace
}  // namespace qkv::lora_files_test
