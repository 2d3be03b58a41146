// GPT-2 folders as the Hugging Face Hub serves them (tests/fixtures/import/gpt2_*, made by
// make_gpt2_fixtures.py with a PyTorch GPT-2 written as transformers computes it): import_pretrained reads
// config.json and model.safetensors in both layouts, with and without buffers, in F32, F16 and BF16; the model
// gives PyTorch's logits within 1e-5 relative and its greedy tokens exactly, and (the trained cases) follows
// PyTorch's 20 AdamW steps within 1e-4 at every step: an imported GPT-2 is an ordinary LanguageModel. Each case
// runs on the CPU (Gpt2Parity) and, built as load_pretrained builds it on the device, on CUDA (Gpt2ParityCuda:
// skipped without a GPU), with the same tolerances.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "parity/parity_util.h"
#include "qkv/config.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/tokenizer.h"
#include "test_util.h"

namespace qkv::gpt2_parity_test {
namespace {

constexpr double kOutputTol = 1e-5, kLossTol = 1e-4;

std::string dir_of(const std::string& c) { return std::string(QKV_FIXTURES_DIR) + "/import/gpt2_" + c; }
SafetensorsFile io_of(const std::string& c) {
  return read_safetensors(std::string(QKV_FIXTURES_DIR) + "/import/gpt2_" + c + ".io.safetensors");
}

// The folder built by load_pretrained on `device`, against PyTorch: logits of the io batch, the greedy continuation of
// the prompt (with and without the KV cache), and when the fixture trained, the 20 losses from these weights.
void expect_pytorch(Device device, const std::string& c) {
  SCOPED_TRACE(c + (device == Device::CUDA ? " on cuda" : " on cpu"));
  const auto f = io_of(c);
  const auto ids = test::ids(f, "input.ids"), targets = test::ids(f, "input.targets");
  const int B = static_cast<int>(f.at("input.ids").shape[0]), T = static_cast<int>(f.at("input.ids").shape[1]);
  const bool trains = f.metadata.count("losses");
  const auto model = load_pretrained(dir_of(c), trains ? test::optimizer_of(f) : OptimizerConfig{}, device);
  LanguageModel& m = *model;
  ASSERT_EQ(m.device(), device);

  const auto got = m.logits(ids, B, T), want = f.floats("output.logits");
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::abs(double(want[i])));
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  std::printf("parity: gpt2_%s on %s: logits max relative difference %.2e\n", c.c_str(),
              device == Device::CUDA ? "cuda" : "cpu", worst / scale);
  test::expect_close("output.logits", got, want, kOutputTol);

  const auto prompt = test::ids(f, "input.prompt"), greedy = test::ids(f, "output.greedy");
  for (bool cache : {true, false}) {
    SamplingOptions o;
    o.max_new_tokens = static_cast<int>(greedy.size());
    o.temperature = 0.f;
    o.use_cache = cache;
    EXPECT_EQ(m.generate(prompt, o), greedy) << "greedy tokens, use_cache = " << cache;
  }

  if (!trains) return;
  const auto losses = test::meta_json(f, "losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 20u);
  double worst_loss = 0;
  for (size_t s = 0; s < losses.size(); ++s) {
    const double l = m.train_step(ids, targets, B, T);
    worst_loss = std::max(worst_loss, std::abs(l - losses[s]) / std::abs(losses[s]));
    ASSERT_LE(std::abs(l - losses[s]) / std::abs(losses[s]), kLossTol)
        << "step " << s << ": qkv " << l << ", PyTorch " << losses[s];
  }
  std::printf("parity: gpt2_%s on %s: 20 AdamW losses max relative difference %.2e\n", c.c_str(),
              device == Device::CUDA ? "cuda" : "cpu", worst_loss);
}

// Each case as a function of the device, and its two tests.
#define QKV_GPT2_CASE(name)                     \
  void name(Device device);                     \
  TEST(Gpt2Parity, name) { name(Device::CPU); } \
  TEST(Gpt2ParityCuda, name) {                  \
    QKV_SKIP_WITHOUT_CUDA();                    \
    name(Device::CUDA);                         \
  }                                             \
  void name(Device device)

nlohmann::json config_json(const ImportedWeights& r) { return nlohmann::json::parse(r.config_json); }

bool has_note(const ImportedWeights& r, const std::string& part) {
  for (const auto& n : r.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

// The gpt2 repo's layout: GPT2Model names (wte, h.N...), F32, the attn.bias masks (F32) and masked_bias (-1e4)
// checked and ignored, no lm_head; gelu_new. 20 AdamW steps with decay on matrices and clipping.
QKV_GPT2_CASE(HubLayoutWithBuffers) {
  const auto r = import_pretrained(dir_of("hub"));
  EXPECT_EQ(r.format, "gpt2");
  EXPECT_EQ(r.kind, "language_model");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("vocab_size"), 61);
  EXPECT_EQ(c.at("context"), 16);
  EXPECT_EQ(c.at("d_model"), 16);
  EXPECT_EQ(c.at("heads"), 2);
  EXPECT_EQ(c.at("layers"), 2);
  EXPECT_EQ(c.at("d_ff"), 64);
  EXPECT_EQ(c.at("activation"), "gelu_tanh");
  EXPECT_EQ(c.at("norm"), "pre");
  EXPECT_EQ(c.at("tie_head"), true);
  EXPECT_TRUE(has_note(r, "2 \"attn.bias\" buffers are GPT-2's causal mask"));
  EXPECT_TRUE(has_note(r, "2 \"attn.masked_bias\" buffers"));
  expect_pytorch(device, "hub");
}

// GPT2LMHeadModel's names ("transformer." and lm_head.weight, equal to wte), no buffers, gelu_pytorch_tanh.
QKV_GPT2_CASE(LmHeadLayoutWithoutBuffers) {
  const auto r = import_pretrained(dir_of("lmhead"));
  EXPECT_EQ(config_json(r).at("activation"), "gelu_tanh");
  EXPECT_TRUE(has_note(r, "\"lm_head.weight\" equals \"transformer.wte.weight\""));
  EXPECT_FALSE(has_note(r, "attn.bias"));
  expect_pytorch(device, "lmhead");
}

// Half-precision files load as float32 (F16 with F16 buffers; BF16 under "transformer." with a BOOL mask):
// PyTorch's logits are those of the stored weights upcast to float32.
QKV_GPT2_CASE(F16AndBf16LoadAsTheirFloat32Values) {
  for (const char* c : {"f16", "bf16"}) {
    const auto r = import_pretrained(dir_of(c));
    // Every weight is exactly its file value upcast: F16 has 11 significant bits, BF16 8.
    const auto w = parse_safetensors(r.weights).floats("tok_emb.weight");
    const auto stored = read_safetensors(dir_of(c) + "/model.safetensors");
    EXPECT_EQ(w, stored.floats(std::string(c) == "f16" ? "wte.weight" : "transformer.wte.weight")) << c;
    expect_pytorch(device, c);
  }
}

// The erf GELU ("gelu") and n_inner = 24 (not 4 n_embd), trained 20 steps.
QKV_GPT2_CASE(GeluErfWithNInner) {
  const auto r = import_pretrained(dir_of("gelu"));
  const auto c = config_json(r);
  EXPECT_EQ(c.at("activation"), "gelu");
  EXPECT_EQ(c.at("d_ff"), 24);
  expect_pytorch(device, "gelu");
}

// The folder with a tokenizer (gpt2_tok: the BPE fixture's tokenizer.json, vocabulary 657, GPT2Model names, no
// buffers): PyTorch's logits and greedy ids, and the text round trip qkv generate --model DIR --prompt TEXT
// makes: the prompt text encodes to Hugging Face's ids, whose greedy continuation decodes to the text the fixture
// script's GPT-2 byte decoder wrote ("greedy_text").
QKV_GPT2_CASE(WithItsBpeTokenizer) {
  const auto r = import_pretrained(dir_of("tok"));
  EXPECT_EQ(config_json(r).at("vocab_size"), 657);
  EXPECT_EQ(config_json(r).at("context"), 48);
  ASSERT_EQ(r.tokenizer_files.count("tokenizer.json"), 1u);
  expect_pytorch(device, "tok");
  const auto f = io_of("tok");
  const auto tok = pretrained_tokenizer(dir_of("tok"));
  ASSERT_TRUE(tok.has_value());
  const auto prompt = tok->encode(f.metadata.at("prompt_text"));
  EXPECT_EQ(prompt, test::ids(f, "input.prompt"));
  const auto m = load_pretrained(dir_of("tok"), {}, device);
  SamplingOptions o;
  o.max_new_tokens = 8;
  o.temperature = 0.f;
  const auto greedy = m->generate(prompt, o);
  EXPECT_EQ(greedy, test::ids(f, "output.greedy"));
  EXPECT_EQ(tok->decode(greedy), f.metadata.at("greedy_text"));
}

// load_pretrained builds the same model, and the bare file through import_weights / load_weights (format
// detected as gpt2, heads given) gives the same logits.
TEST(Gpt2Parity, LoadPretrainedAndTheBareFileAgree) {
  const auto f = io_of("gelu");
  const auto ids = test::ids(f, "input.ids");
  const auto m = load_pretrained(dir_of("gelu"));
  const auto want = m->logits(ids, 3, 12);
  test::expect_close("load_pretrained", want, f.floats("output.logits"), kOutputTol);
  const auto bytes = io::read_file(dir_of("gelu") + "/model.safetensors");
  EXPECT_EQ(detect_format(bytes), "gpt2");
  ImportOptions o;
  o.heads = 2;
  o.activation = "gelu";
  const auto r = import_weights(bytes, o);
  EXPECT_EQ(r.format, "gpt2");
  LanguageModel bare(language_model_config_from_json(r.config_json));
  bare.load_weights(bytes);  // load_weights maps the Hub names itself
  EXPECT_EQ(bare.logits(ids, 3, 12), want);
}

}  // namespace
}  // namespace qkv::gpt2_parity_test
