// State dicts as PyTorch users have them (tests/fixtures/import, made by make_import_fixtures.py): each
// loads unchanged through load_weights and gives PyTorch's logits within 1e-5 relative; the classes qkv
// trains natively then follow PyTorch's 20 optimizer steps within 1e-4 at every step. import_weights
// (what `qkv import` runs) tells the config from the shapes and the few options shapes cannot tell.
#include <cmath>
#include <cstdio>
#include <functional>

#include "io/checkpoint.h"
#include "parity/parity_util.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"

namespace qkv::import_parity_test {
namespace {

constexpr double kOutputTol = 1e-5, kLossTol = 1e-4;

std::string path_of(const std::string& name) { return std::string(QKV_FIXTURES_DIR) + "/import/" + name; }
std::vector<uint8_t> state_dict(const std::string& c) { return io::read_file(path_of(c + ".safetensors")); }
SafetensorsFile io_of(const std::string& c) { return read_safetensors(path_of(c + ".io.safetensors")); }

// The logits of the rows that matter: all, or (Seq2Seq, "non_pad_tgt_in") the positions whose target input is
// not padding, where a seed's own masks make the padded rows an artefact (see the fixture script).
std::vector<float> rows(const std::vector<float>& logits, const SafetensorsFile& f) {
  if (f.metadata.at("rows") == "all") return logits;
  const auto tgt = f.ints("input.tgt_in");
  const size_t V = logits.size() / tgt.size();
  std::vector<float> out;
  for (size_t r = 0; r < tgt.size(); ++r)
    if (tgt[r] != 0) out.insert(out.end(), logits.begin() + r * V, logits.begin() + (r + 1) * V);
  return out;
}

// expect_close, and the figure printed: "parity: <case> logits max relative difference <x>".
void expect_logits(const std::string& c, const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::abs(double(want[i])));
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  std::printf("parity: %s logits max relative difference %.2e\n", c.c_str(), worst / scale);
  test::expect_close("output.logits", got, want, kOutputTol);
}

void expect_trajectory(const SafetensorsFile& f, const std::function<float()>& step) {
  const auto want = test::meta_json(f, "losses").get<std::vector<double>>();
  ASSERT_EQ(want.size(), 20u);
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const double got = step();
    worst = std::max(worst, std::abs(got - want[s]) / std::abs(want[s]));
    ASSERT_LE(std::abs(got - want[s]) / std::abs(want[s]), kLossTol)
        << "step " << s << ": qkv " << got << ", PyTorch " << want[s];
  }
  std::printf("parity: %s 20 losses max relative difference %.2e\n", f.metadata.at("case").c_str(), worst);
}

ImportedWeights imported(const std::string& c, int heads) {
  ImportOptions o;
  o.heads = heads;
  return import_weights(state_dict(c), o);
}

// The case's state dict loaded unchanged into a model of the imported config; logits against PyTorch's;
// then (when the fixture has a trajectory) 20 training steps from those weights.
void seq2seq_case(const std::string& c, const ImportedWeights& r) {
  SCOPED_TRACE(c);
  const auto f = io_of(c);
  ASSERT_EQ(r.kind, "seq2seq");
  const auto src = test::ids(f, "input.src"), tgt_in = test::ids(f, "input.tgt_in");
  const int B = static_cast<int>(f.at("input.src").shape[0]), S = static_cast<int>(f.at("input.src").shape[1]),
            T = static_cast<int>(f.at("input.tgt_in").shape[1]);
  const bool trains = f.metadata.count("losses");
  Seq2Seq m(seq2seq_config_from_json(r.config_json), trains ? test::optimizer_of(f) : OptimizerConfig{});
  m.load_weights(state_dict(c));
  const auto got = m.logits(src, tgt_in, B, S, T);
  expect_logits(c, rows(got, f), rows(f.floats("output.logits"), f));
  Seq2Seq again(seq2seq_config_from_json(r.config_json));  // import_weights' file: the same weights
  again.load_weights(r.weights);
  EXPECT_EQ(again.logits(src, tgt_in, B, S, T), got);
  if (!trains) return;
  const auto tgt_out = test::ids(f, "input.tgt_out");
  expect_trajectory(f, [&] { return m.train_step(src, tgt_in, tgt_out, B, S, T); });
}

void classifier_case(const std::string& c, const ImportedWeights& r) {
  SCOPED_TRACE(c);
  const auto f = io_of(c);
  ASSERT_EQ(r.kind, "classifier");
  const auto ids = test::ids(f, "input.ids"), labels = test::ids(f, "input.labels");
  const int B = static_cast<int>(f.at("input.ids").shape[0]), T = static_cast<int>(f.at("input.ids").shape[1]);
  Classifier m(classifier_config_from_json(r.config_json), test::optimizer_of(f));
  m.load_weights(state_dict(c));
  expect_logits(c, m.logits(ids, B, T), f.floats("output.logits"));
  expect_trajectory(f, [&] { return m.train_step(ids, labels, B, T); });
}

void lm_case(const std::string& c, const ImportedWeights& r, const std::vector<uint8_t>& bytes) {
  SCOPED_TRACE(c);
  const auto f = io_of(c);
  ASSERT_EQ(r.kind, "language_model");
  const auto ids = test::ids(f, "input.ids"), targets = test::ids(f, "input.targets");
  const int B = static_cast<int>(f.at("input.ids").shape[0]), T = static_cast<int>(f.at("input.ids").shape[1]);
  const bool trains = f.metadata.count("losses");
  LanguageModel m(language_model_config_from_json(r.config_json), trains ? test::optimizer_of(f) : OptimizerConfig{});
  m.load_weights(bytes);
  expect_logits(c, m.logits(ids, B, T), f.floats("output.logits"));
  if (trains) expect_trajectory(f, [&] { return m.train_step(ids, targets, B, T); });
}

nlohmann::json config_json(const ImportedWeights& r) { return nlohmann::json::parse(r.config_json); }

// Seed 000's TransformerEncoder (separate W_q..W_o, nn.Sequential feed-forward, its "pe" buffer of 5000 rows,
// no final norm, no embedding scale) under a Linear head on the first token, with padding in the batch.
TEST(ImportParity, Seed000Encoder) {
  const auto r = imported("seed000_encoder", 2);
  EXPECT_EQ(r.format, "seed000");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("vocab_size"), 10000);
  EXPECT_EQ(c.at("context"), 5000);
  EXPECT_EQ(c.at("final_norm"), false);
  EXPECT_EQ(c.at("scale_embedding"), false);
  EXPECT_EQ(c.at("head"), "linear");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("encoder.pos_encoding.pe"), std::string::npos) << r.notes[0];
  classifier_case("seed000_encoder", r);
}

// Seed 002 (DataCamp): separate projections, fc1/fc2, no embedding scale, no final norms, sinusoidal "pe".
TEST(ImportParity, Seed002Transformer) {
  const auto r = imported("seed002_transformer", 4);
  EXPECT_EQ(r.format, "seed002");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("final_norm"), false);
  EXPECT_EQ(c.at("scale_embedding"), false);
  EXPECT_EQ(c.at("positions"), "sinusoidal");
  seq2seq_case("seed002_transformer", r);
}

// Seed 003's TransformerClassifier: x sqrt(d_model), sinusoidal "pe" (512 rows), final norm, [CLS] MLP head.
TEST(ImportParity, Seed003Classifier) {
  const auto r = imported("seed003_classifier", 4);
  EXPECT_EQ(r.format, "seed003");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("scale_embedding"), true);
  EXPECT_EQ(c.at("final_norm"), true);
  EXPECT_EQ(c.at("head"), "mlp");
  EXPECT_EQ(c.at("context"), 512);
  classifier_case("seed003_classifier", r);
}

// Seed 004: per-head shared q/k/v (head_dim x head_dim, no bias) expanded into block-diagonal weights, the
// 1/sqrt(embed_size) scale folded into W_q, learned positions, no final norms. Forward only (see the note).
TEST(ImportParity, Seed004Transformer) {
  const auto r = import_weights(state_dict("seed004_transformer"));  // heads from the shapes
  EXPECT_EQ(r.format, "seed004");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("heads"), 4);
  EXPECT_EQ(c.at("positions"), "learned");
  EXPECT_EQ(c.at("final_norm"), false);
  EXPECT_EQ(c.at("d_ff"), 32);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("sqrt(head_dim / embed_size) = 0.5"), std::string::npos) << r.notes[0];
  seq2seq_case("seed004_transformer", r);
}

// PyTorch's translation tutorial: "transformer." prefix, src_tok_emb.embedding.weight, generator,
// positional_encoding.pos_embedding (64, 1, 16) checked against qkv's table and ignored.
TEST(ImportParity, TorchTranslationTutorial) {
  const auto r = imported("torch_seq2seq_tutorial", 4);
  EXPECT_EQ(r.format, "torch");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("context"), 64);
  EXPECT_EQ(c.at("scale_embedding"), true);
  EXPECT_EQ(c.at("final_norm"), true);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("positional_encoding.pos_embedding"), std::string::npos) << r.notes[0];
  seq2seq_case("torch_seq2seq_tutorial", r);
}

// nanoGPT with biases: its causal-mask buffers ignored, the tied head stored twice (torch.save's state dict)
// or once (safetensors' save_model drops one copy: either loads).
TEST(ImportParity, NanoGptWithBias) {
  const auto bytes = state_dict("nanogpt_bias");
  const auto r = imported("nanogpt_bias", 4);
  EXPECT_EQ(r.format, "nanogpt");
  const auto c = config_json(r);
  EXPECT_EQ(c.at("tie_head"), true);
  EXPECT_EQ(c.at("bias"), true);
  EXPECT_EQ(c.at("norm"), "pre");
  EXPECT_EQ(c.at("activation"), "gelu");
  lm_case("nanogpt_bias", r, bytes);
  for (const char* drop : {"lm_head.weight", "transformer.wte.weight"}) {
    const auto f = read_safetensors(path_of("nanogpt_bias.safetensors"));
    std::vector<TensorRef> refs;
    std::vector<std::vector<float>> keep;
    keep.reserve(f.tensors.size());
    for (const auto& t : f.tensors) {
      if (t.name == drop) continue;
      keep.push_back(f.floats(t.name));
      refs.emplace_back(t.name, t.shape, std::span<const float>(keep.back()));
    }
    SCOPED_TRACE(std::string("without ") + drop);
    lm_case("nanogpt_bias", r, serialize_safetensors(refs, {}));
  }
}

// nanoGPT without biases: its LayerNorms have none either; qkv's are imported as zeros (exact forward).
TEST(ImportParity, NanoGptWithoutBias) {
  const auto r = imported("nanogpt_nobias", 4);
  EXPECT_EQ(config_json(r).at("bias"), false);
  lm_case("nanogpt_nobias", r, state_dict("nanogpt_nobias"));
}

}  // namespace
}  // namespace qkv::import_parity_test
