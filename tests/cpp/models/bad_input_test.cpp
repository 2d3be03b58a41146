// Seq2Seq and Classifier refuse bad input with a qkv::Error naming the argument, and stay usable.
// (LanguageModel's cases are in language_model_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::bad_input_test {
namespace {

using test::message_of;

#define EXPECT_ERROR(expr, text) \
  EXPECT_NE(message_of([&] { expr; }).find(text), std::string::npos) << message_of([&] { expr; })

Seq2SeqConfig s2s_config() {
  return {
      .src_vocab = 7, .tgt_vocab = 8, .context = 6, .d_model = 8, .heads = 2, .encoder_layers = 1, .decoder_layers = 1};
}

TEST(BadInput, Seq2SeqConfig) {
  auto c = s2s_config();
  c.d_model = 9;
  EXPECT_ERROR(Seq2Seq m(c), "d_model = 9 must be divisible by heads = 2");
  c = s2s_config();
  c.decoder_layers = 0;
  EXPECT_ERROR(Seq2Seq m(c), "decoder_layers = 0");
  c = s2s_config();
  c.pad_id = 7;
  EXPECT_ERROR(Seq2Seq m(c), "pad_id = 7");
  c = s2s_config();
  c.label_smoothing = 1.5f;
  EXPECT_ERROR(Seq2Seq m(c), "label_smoothing = 1.5");
}

TEST(BadInput, Seq2SeqBatches) {
  Seq2Seq m(s2s_config());
  const std::vector<int32_t> src = {1, 2, 3, 0}, ti = {1, 4, 5}, to = {4, 5, 2};
  EXPECT_ERROR(m.train_step(src, ti, to, 1, 4, 4), "tgt_in has 3 tokens: expected batch * tgt_len = 1 * 4 = 4");
  EXPECT_ERROR(m.train_step(src, ti, to, 1, 7, 3), "src_len = 7 is invalid: expected 1 <= src_len <= context = 6");
  EXPECT_ERROR(m.train_step(std::vector<int32_t>{1, 9, 3, 0}, ti, to, 1, 4, 3), "src[1] = 9 is out of range");
  EXPECT_ERROR(m.train_step(src, ti, std::vector<int32_t>{4, 8, 2}, 1, 4, 3), "tgt_out[1] = 8 is out of range");
  EXPECT_ERROR(m.train_step(src, ti, std::vector<int32_t>{0, 0, 0}, 1, 4, 3), "tgt_out holds only pad_id = 0");
  EXPECT_ERROR(m.evaluate(src, ti, std::vector<int32_t>{0, 0, 0}, 1, 4, 3), "tgt_out holds only pad_id = 0");
  // bos or eos = pad_id: masked, or never a target, in training.
  EXPECT_ERROR(m.greedy(src, 1, 4, 0, 2, 3), "bos = 0 is pad_id: expected a token id other than pad_id = 0");
  EXPECT_ERROR(m.greedy(src, 1, 4, 1, 0, 3), "eos = 0 is pad_id: expected a token id other than pad_id = 0");
  EXPECT_ERROR(m.greedy(src, 1, 4, 1, 2, 6), "max_len = 6 is invalid");
  EXPECT_ERROR(m.attention(AttentionKind::Cross, 3), "layer = 3 is out of range");
  EXPECT_EQ(m.step(), 0);
  EXPECT_TRUE(std::isfinite(m.train_step(src, ti, to, 1, 4, 3)));  // still usable
  EXPECT_EQ(m.attention(AttentionKind::Cross, 0).size(), size_t{1 * 2 * 3 * 4});
}

TEST(BadInput, ClassifierConfigAndBatches) {
  ClassifierConfig c{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3};
  auto bad = c;
  bad.classes = 1;
  EXPECT_ERROR(Classifier m(bad), "classes = 1");
  bad = c;
  bad.heads = 0;
  EXPECT_ERROR(Classifier m(bad), "heads = 0");
  Classifier m(c);
  const std::vector<int32_t> tok = {1, 2, 3, 0, 0}, lab = {2};
  EXPECT_ERROR(m.train_step(tok, std::vector<int32_t>{3}, 1, 5), "labels[0] = 3 is out of range");
  EXPECT_ERROR(m.train_step(tok, std::vector<int32_t>{1, 2}, 1, 5), "labels has 2 entries: expected batch = 1");
  EXPECT_ERROR(m.train_step(tok, lab, 1, 6), "seq = 6 is invalid");
  EXPECT_ERROR(m.train_step(std::vector<int32_t>{1, 2, -3, 0, 0}, lab, 1, 5), "tokens[2] = -3 is out of range");
  EXPECT_ERROR(m.train_step(tok, lab, 0, 5), "batch = 0");
  EXPECT_TRUE(std::isfinite(m.train_step(tok, lab, 1, 5)));
}

TEST(BadInput, NonFiniteWeightsStopTheStepAndKeepTheWeights) {
  ClassifierConfig c{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3};
  Classifier m(c);
  auto params = m.parameters();
  params.back().value[0] = NAN;  // a poisoned head bias
  std::vector<float> before;
  for (auto& p : params) before.insert(before.end(), p.value.begin(), p.value.end());
  EXPECT_ERROR(m.train_step(std::vector<int32_t>{1, 2, 3, 0, 0}, std::vector<int32_t>{2}, 1, 5), "not finite");
  size_t k = 0;
  for (auto& p : params)
    for (float v : p.value) {
      const float w = before[k++];
      ASSERT_TRUE(v == w || (std::isnan(v) && std::isnan(w)));
    }
  EXPECT_EQ(m.step(), 0);
}

// Weights that hold NaN (here one bias) make logits() and evaluate() throw, in each model, naming the first value
// that is not finite, rather than return NaN; the model still answers once its weights are finite again.
TEST(BadInput, OutputsThatAreNotFiniteThrow) {
  ClassifierConfig c{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3};
  Classifier cls(c);
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5}, label{2};
  float& bias = cls.parameters().back().value[0];
  bias = NAN;
  // (NaN prints as nan or -nan, by its sign bit.)
  EXPECT_ERROR(cls.logits(tokens, 1, 5), "nan is not finite: the model's weights overflow or hold NaN");
  EXPECT_ERROR(cls.logits(tokens, 1, 5), "logits[0] = ");
  EXPECT_ERROR(cls.evaluate(tokens, label, 1, 5), "nan, not finite: the model's weights overflow or hold NaN");
  bias = 0.f;
  EXPECT_EQ(cls.logits(tokens, 1, 5).size(), 3u);

  Seq2Seq s2s(s2s_config());
  s2s.parameters().back().value[0] = INFINITY;  // the generator's bias: every logit of token 0 is infinite
  const std::vector<int32_t> src{1, 2, 3}, tgt_in{1, 2}, tgt_out{2, 3};
  EXPECT_ERROR(s2s.logits(src, tgt_in, 1, 3, 2), "logits[0] = inf is not finite");
  EXPECT_ERROR(s2s.evaluate(src, tgt_in, tgt_out, 1, 3, 2), "evaluate: the loss is");
}

// load() of a foreign state dict whose shapes do not fix the whole config (seed 003's classifier has no position
// table, so no context; nanoGPT's file no head count) names the missing field and the two ways such a file loads:
// load_weights into a model created with its config (which then works), or `qkv import`.
std::vector<uint8_t> import_fixture(const std::string& name) {
  std::ifstream in(std::string(QKV_FIXTURES_DIR) + "/import/" + name + ".safetensors", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(BadInput, LoadOfAForeignStateDictSaysHowItLoads) {
  const auto seed003 = import_fixture("seed003_classifier");
  ASSERT_FALSE(seed003.empty());
  const std::string e = message_of([&] { Classifier::load(seed003); });
  for (const char* part :
       {"a seed003 state dict does not fix the whole config of a classifier",
        "config.context is missing: it is required", "load_weights (JS: loadWeights)", "qkv import --from seed003"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " is not in: " << e;
  Classifier m({.vocab_size = 20,
                .context = 512,
                .d_model = 16,
                .heads = 4,
                .layers = 2,
                .d_ff = 32,
                .classes = 2,
                .head = ClassifierHead::MLP});
  EXPECT_NO_THROW(m.load_weights(seed003));

  const std::string lm = message_of([&] { LanguageModel::load(import_fixture("nanogpt_bias")); });
  EXPECT_NE(lm.find("a nanogpt state dict does not fix the whole config of a language_model"), std::string::npos) << lm;
  EXPECT_NE(lm.find("heads is missing"), std::string::npos) << lm;
}

}  // namespace
}  // namespace qkv::bad_input_test
