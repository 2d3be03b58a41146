// Whole models through the reference executor (ops::set_cpu_reference, ggml's use_ref): the same model code
// over plain loops must agree with the SIMD and threaded CPU executor, so the op boundary is exercised end to
// end on every machine — the dispatch a GPU run goes through, with the oracle behind it. Logits within 1e-5,
// 10 training steps within 1e-4 relative, greedy tokens and beam search exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::reference_test {
namespace {

constexpr double kLogitTol = 1e-5, kLossTol = 1e-4;

// The model's checkpoint loaded while the CPU means the reference executor: the same weights on both.
template <class Model>
std::unique_ptr<Model> on_reference(Model& m) {
  const bool before = ops::set_cpu_reference(true);
  auto r = Model::load(m.save());
  ops::set_cpu_reference(before);
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(got[i] - want[i]), kLogitTol * std::max(1.f, std::abs(want[i])))
        << what << "[" << i << "]: reference " << got[i] << ", cpu " << want[i];
}

std::vector<int32_t> ids(size_t n, int V, int seed, int pad_every = 0) {
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = pad_every && static_cast<int>(i % pad_every) == pad_every - 1
                 ? 0
                 : 1 + static_cast<int32_t>((i * 7 + seed * 13) % (V - 1));
  return out;
}

TEST(ReferenceModels, LanguageModelFollowsTheCpuExecutor) {
  LanguageModelConfig c{.vocab_size = 11, .context = 9, .d_model = 16, .heads = 2, .layers = 2, .d_ff = 24};
  LanguageModel cpu(c);
  const auto ref = on_reference(cpu);
  const int B = 2, T = 9;
  const auto in = ids(B * T, 11, 1), tg = ids(B * T, 11, 2);
  expect_close(ref->logits(in, B, T), cpu.logits(in, B, T), "logits");
  expect_close(ref->attention(1), cpu.attention(1), "attention weights");
  for (int s = 0; s < 10; ++s) {
    const float lc = cpu.train_step(in, tg, B, T), lr = ref->train_step(in, tg, B, T);
    ASSERT_LE(std::abs(lr - lc) / std::abs(lc), kLossTol) << "step " << s;
  }
  SamplingOptions o;
  o.max_new_tokens = 12;
  o.temperature = 0.f;
  const std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_EQ(ref->generate(prompt, o), cpu.generate(prompt, o));
}

TEST(ReferenceModels, Seq2SeqFollowsTheCpuExecutor) {
  Seq2SeqConfig c{.src_vocab = 9,
                  .tgt_vocab = 10,
                  .context = 8,
                  .d_model = 16,
                  .heads = 2,
                  .encoder_layers = 1,
                  .decoder_layers = 2,
                  .d_ff = 24};
  c.norm = NormPosition::Post;
  c.positions = Positions::Sinusoidal;
  c.label_smoothing = 0.1f;
  Seq2Seq cpu(c);
  const auto ref = on_reference(cpu);
  const int B = 3, S = 7, T = 6;
  const auto src = ids(B * S, 9, 3, 5), tin = ids(B * T, 10, 4, 4), tout = ids(B * T, 10, 5, 4);
  expect_close(ref->logits(src, tin, B, S, T), cpu.logits(src, tin, B, S, T), "logits");
  for (int s = 0; s < 10; ++s) {
    const float lc = cpu.train_step(src, tin, tout, B, S, T), lr = ref->train_step(src, tin, tout, B, S, T);
    ASSERT_LE(std::abs(lr - lc) / std::abs(lc), kLossTol) << "step " << s;
  }
  DecodeOptions o;
  o.bos = 1;
  o.eos = 2;
  o.max_len = 7;
  o.beam_width = 3;
  EXPECT_EQ(ref->generate(src, B, S, o).tokens, cpu.generate(src, B, S, o).tokens);
}

TEST(ReferenceModels, ClassifierFollowsTheCpuExecutorWithBothPoolings) {
  for (Pooling pooling : {Pooling::First, Pooling::Mean}) {
    ClassifierConfig c{
        .vocab_size = 12, .context = 8, .d_model = 16, .heads = 2, .layers = 2, .d_ff = 24, .classes = 3};
    c.pooling = pooling;
    c.head = pooling == Pooling::First ? ClassifierHead::MLP : ClassifierHead::Linear;
    Classifier cpu(c);
    const auto ref = on_reference(cpu);
    const int B = 4, T = 8;
    const auto tok = ids(B * T, 12, 6, 3);
    const std::vector<int32_t> labels = {0, 1, 2, 1};
    expect_close(ref->logits(tok, B, T), cpu.logits(tok, B, T), "logits");
    for (int s = 0; s < 10; ++s) {
      const float lc = cpu.train_step(tok, labels, B, T), lr = ref->train_step(tok, labels, B, T);
      ASSERT_LE(std::abs(lr - lc) / std::abs(lc), kLossTol) << "step " << s;
    }
  }
}

// A row of padding only, mean-pooled: its attention has no key to read (weights 0, output 0) and its pool has
// no token, so it pools a vector of zeros (classifier.h) and its logits are the Linear head's bias, on both
// executors, whatever the other rows hold. Its loss still counts, and its gradient reaches only the head.
TEST(ReferenceModels, ClassifierRowOfPaddingPoolsZeros) {
  ClassifierConfig c{.vocab_size = 12, .context = 8, .d_model = 16, .heads = 2, .layers = 1, .d_ff = 24, .classes = 3};
  c.pooling = Pooling::Mean;
  c.head = ClassifierHead::Linear;
  Classifier cpu(c);
  const auto ref = on_reference(cpu);
  const int B = 3, T = 8;
  auto tok = ids(B * T, 12, 5, 3);
  std::fill(tok.begin() + T, tok.begin() + 2 * T, 0);  // row 1: pad_id 0 everywhere
  std::vector<float> bias;
  for (const ParameterView& p : cpu.parameters())
    if (std::string(p.name) == "classifier.bias") bias.assign(p.value.begin(), p.value.end());
  ASSERT_EQ(bias.size(), 3u);
  for (Classifier* m : {&cpu, ref.get()}) {
    const std::vector<float> z = m->logits(tok, B, T);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(z[3 + k], bias[k]) << (m == &cpu ? "cpu" : "reference") << " class " << k;
    for (int k : {0, 6}) EXPECT_NE(z[k], bias[k % 3]);  // the other rows are not the bias alone
  }
  // Alone in its batch, the padding row's gradient is the head bias's only: every encoder gradient is 0.
  const std::vector<int32_t> pad_row(tok.begin() + T, tok.begin() + 2 * T), label = {2};
  cpu.zero_grad();
  cpu.accumulate(pad_row, label, 1, T);
  for (const ParameterView& p : cpu.parameters()) {
    const bool nonzero = std::any_of(p.grad.begin(), p.grad.end(), [](float g) { return g != 0.f; });
    EXPECT_EQ(nonzero, std::string(p.name) == "classifier.bias") << p.name;
  }
}

}  // namespace
}  // namespace qkv::reference_test
