// The language model's chunked training head (models/head_chunk.h): a training step runs the head product, the
// cross-entropy with its gradient and the head's backward over chunks of rows. Against the same model planned with
// one chunk of every row (the whole (rows, V) logits: the path before chunking), each row's loss is the same bit for
// bit, and so is every gradient that is a per-row function of d top (the stack's, the embedding's); the head's weight
// gradient (and a head adapter's) sums over the chunks in turn, so it agrees to float rounding. Full training and
// LoRA (float32 and q4 base), tied and untied heads, dropout on; the memory() arena of a large-vocab shape.
#include "models/head_chunk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/lora.h"
#include "runtime/random.h"

namespace qkv::head_chunk_test {
namespace {

// Sets the chunk for the models made (and planned) inside its scope.
struct ChunkRows {
  explicit ChunkRows(int rows) { models::set_head_chunk_rows(rows); }
  ~ChunkRows() { models::set_head_chunk_rows(0); }
};

std::vector<int32_t> ids(size_t n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> out(n);
  for (auto& x : out) x = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
  return out;
}

struct Variant {
  const char* name;
  bool tie_head;
  bool lora;
  bool q4;
  float lora_dropout;
};

LanguageModelConfig config(bool tie_head) {
  LanguageModelConfig c;
  c.vocab_size = 37;
  c.context = 8;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 12;
  c.tie_head = tie_head;
  c.dropout = 0.1f;  // the stack's masks are per pass, whatever the head's chunking
  c.seed = 3;
  return c;
}

std::unique_ptr<LanguageModel> make(const Variant& v) {
  auto m = std::make_unique<LanguageModel>(config(v.tie_head));
  if (v.q4) m->quantize(WeightFormat::Q4);
  if (v.lora) {
    LoraOptions o;
    o.rank = 2;
    o.alpha = 3.f;
    o.dropout = v.lora_dropout;
    o.targets = {"qkv", "out", "up", "down", "head"};
    o.seed = 9;
    m->add_lora(o);
    // B = 0 would make every dA zero: give the adapters values.
    Rng rng(17);
    for (auto p : m->lora_parameters())
      for (float& x : p.value) x = 0.3f * static_cast<float>(rng.uniform() * 2.0 - 1.0);
  }
  return m;
}

std::vector<ParameterView> trained(LanguageModel& m, bool lora) { return lora ? m.lora_parameters() : m.parameters(); }

bool head_gradient(const std::string& name) {
  return name == "lm_head.weight" || name == "tok_emb.weight" || name.rfind("lm_head", 0) == 0;
}

// Gradients of two models' trained parameters: equal bit for bit, the head's to rounding (summed over chunks).
void expect_same_gradients(LanguageModel& whole, LanguageModel& chunked, bool lora, const std::string& when) {
  std::vector<ParameterView> a = trained(whole, lora), b = trained(chunked, lora);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string name = a[i].name;
    ASSERT_EQ(name, b[i].name);
    ASSERT_EQ(a[i].grad.size(), b[i].grad.size()) << name;
    double max_abs = 0.0;
    for (float g : a[i].grad) max_abs = std::max(max_abs, static_cast<double>(std::fabs(g)));
    for (size_t j = 0; j < a[i].grad.size(); ++j) {
      if (head_gradient(name)) {
        EXPECT_NEAR(a[i].grad[j], b[i].grad[j], 1e-6 * std::max(1.0, max_abs))
            << when << " " << name << "[" << j << "]";
      } else {
        EXPECT_EQ(a[i].grad[j], b[i].grad[j]) << when << " " << name << "[" << j << "]";
      }
    }
  }
}

class HeadChunk : public ::testing::TestWithParam<Variant> {};

TEST_P(HeadChunk, TrainingMatchesTheWholeHead) {
  const Variant& v = GetParam();
  const int B = 2, T = 7, V = 37;  // 14 rows: chunks of 3, 3, 3 and 5 (a last chunk of 2 joins the one before)
  std::unique_ptr<LanguageModel> whole, chunked;
  {
    ChunkRows c(1 << 20);
    whole = make(v);
  }
  {
    ChunkRows c(3);
    chunked = make(v);
  }
  const std::vector<int32_t> in = ids(B * T, V, 1), tg = ids(B * T, V, 2);
  // The eval paths plan every row's logits (the chunked model's arena grows for them): the same values from both.
  EXPECT_EQ(whole->logits(in, B, T), chunked->logits(in, B, T));
  EXPECT_EQ(whole->evaluate(in, tg, B, T).loss, chunked->evaluate(in, tg, B, T).loss);
  // forward_backward: the checked order (the head's backward after the loss is read).
  const float la = whole->forward_backward(in, tg, B, T), lb = chunked->forward_backward(in, tg, B, T);
  EXPECT_TRUE(std::isfinite(la));
  EXPECT_EQ(la, lb);
  expect_same_gradients(*whole, *chunked, v.lora, "forward_backward");
  // accumulate with a weight on top of those gradients.
  const std::vector<int32_t> in2 = ids(B * T, V, 3), tg2 = ids(B * T, V, 4);
  EXPECT_EQ(whole->accumulate(in2, tg2, B, T, 0.5f), chunked->accumulate(in2, tg2, B, T, 0.5f));
  expect_same_gradients(*whole, *chunked, v.lora, "accumulate");
  // train_step: the head's backward fused with its loss. The first step's gradients are compared; the weights then
  // differ by the head gradient's rounding only.
  EXPECT_EQ(whole->train_step(in, tg, B, T), chunked->train_step(in, tg, B, T));
  expect_same_gradients(*whole, *chunked, v.lora, "train_step");
  for (int s = 0; s < 3; ++s) {
    const float a = whole->train_step(in2, tg2, B, T), b = chunked->train_step(in2, tg2, B, T);
    EXPECT_NEAR(a, b, 1e-5f * std::fabs(a)) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, HeadChunk,
    ::testing::Values(Variant{"full_untied", false, false, false, 0.f}, Variant{"full_tied", true, false, false, 0.f},
                      Variant{"lora_untied", false, true, false, 0.f}, Variant{"lora_tied", true, true, false, 0.f},
                      Variant{"lora_dropout", false, true, false, 0.2f}, Variant{"lora_q4", false, true, true, 0.f}),
    [](const auto& info) { return std::string(info.param.name); });

// GPT-2's vocabulary on a small stack, context 64, no dropout: the memory tests' model.
LanguageModelConfig large_vocab() {
  LanguageModelConfig c = config(false);
  c.vocab_size = 50257;
  c.context = 64;
  c.dropout = 0.f;
  return c;
}

// A training step's arena holds (chunk, V) logits, not (rows, V): GPT-2's vocabulary on a small stack, 256 rows.
TEST(HeadChunkMemory, TrainingArenaHoldsOneChunkOfLogits) {
  const LanguageModelConfig c = large_vocab();
  const int B = 4, T = 64, rows = B * T;
  const size_t whole_logits = static_cast<size_t>(rows) * c.vocab_size * sizeof(float);
  // A chunk's logits: kHeadChunkRows, and room for a last chunk of 1 or 2 rows joining the one before it.
  const size_t chunk_logits = static_cast<size_t>(models::kHeadChunkRows + 2) * c.vocab_size * sizeof(float);
  const std::vector<int32_t> in = ids(rows, c.vocab_size, 1), tg = ids(rows, c.vocab_size, 2);
  LanguageModel m(c);
  m.train_step(in, tg, B, T);
  const size_t training = m.memory().activations;
  EXPECT_GE(training, chunk_logits - 2 * c.vocab_size * sizeof(float));
  EXPECT_LT(training, whole_logits);  // the whole logits alone would not fit in it
  // evaluate() asks for every row's logits: the arena grows by the rest of them, and training keeps using it.
  m.evaluate(in, tg, B, T);
  const size_t evaluating = m.memory().activations;
  // The buffers are aligned (qkv/workspace.h): a few bytes either way.
  EXPECT_NEAR(static_cast<double>(evaluating - training), static_cast<double>(whole_logits - chunk_logits), 4096.0);
  m.train_step(in, tg, B, T);
  EXPECT_EQ(m.memory().activations, evaluating);
}

// Cached generation reads one row of logits per sequence; a training arena's chunk holds at least as many rows as the
// batch it was planned for, so that a model that trained on a batch of 6 with 2-row chunks, then generates 6 prompts at
// once (which plans nothing new for the logits), has room for them (forward_cached checks it: before, a chunk of 4 rows
// took the batch's 6), and the rows are each prompt's own generation.
TEST(HeadChunkMemory, AChunkHoldsABatchsLastRows) {
  LanguageModelConfig c;
  c.vocab_size = 300;
  c.context = 8;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  const int B = 6, T = 8;
  const std::vector<int32_t> in = ids(B * T, c.vocab_size, 1), tg = ids(B * T, c.vocab_size, 2);
  SamplingOptions o;
  o.max_new_tokens = 4;
  o.temperature = 0.f;
  std::vector<int32_t> prompts(B * 2);
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = static_cast<int32_t>(i * 41 % c.vocab_size);
  const ChunkRows two(2);
  LanguageModel m(c);
  m.train_step(in, tg, B, T);
  const auto batched = m.generate(prompts, B, 2, o);  // first: the arena as training planned it
  ASSERT_EQ(batched.size(), static_cast<size_t>(B));
  for (int b = 0; b < B; ++b)
    EXPECT_EQ(batched[b], m.generate(std::span<const int32_t>(prompts.data() + 2 * b, 2), o)) << "row " << b;
}

// Chunks are sized by the vocabulary: whole multiples of 64 rows whose logits stay within 12 MiB, at least 64 rows.
TEST(HeadChunkRule, ChunksHoldAtMostTwelveMebibytesOfLogitsAndAtLeast64Rows) {
  EXPECT_EQ(models::head_chunk_rows_for(50257), 64);   // GPT-2: 12.3 MiB, the floor of 64 rows
  EXPECT_EQ(models::head_chunk_rows_for(24576), 128);  // exactly 12 MiB
  EXPECT_EQ(models::head_chunk_rows_for(24577), 64);   // a float past it
  EXPECT_EQ(models::head_chunk_rows_for(65), 48384);   // a character vocabulary: 756 x 64 rows
  EXPECT_EQ(models::head_chunk_rows_for(1), 3 << 20);
  for (const int V : {1, 7, 65, 1000, 5000, 24577, 50257, 250000}) {
    const int rows = models::head_chunk_rows_for(V);
    EXPECT_EQ(rows % models::kHeadChunkRows, 0) << V;
    EXPECT_TRUE(rows == models::kHeadChunkRows || static_cast<size_t>(rows) * V <= models::kHeadChunkLogits) << V;
    EXPECT_GT(static_cast<size_t>(rows + models::kHeadChunkRows) * V, models::kHeadChunkLogits) << V;  // the most
  }
  EXPECT_THROW(models::head_chunk_rows_for(0), Error);
}

// Where the stack holds more than 8 x 12 MiB for the backward (its activations kept, no recomputation), a chunk's
// logits may take an eighth of it, in whole multiples of 64 rows; less held leaves the 12 MiB rule as it was.
TEST(HeadChunkRule, KeptActivationsLetAChunkTakeAnEighthOfThem) {
  const size_t mib = size_t{1} << 18;                                // floats
  EXPECT_EQ(models::head_chunk_rows_for(50257, 50 * mib), 64);       // recomputing: GPT-2's ~50 MiB saved
  EXPECT_EQ(models::head_chunk_rows_for(50257, 8 * 12 * mib), 64);   // 12 MiB: the floor again
  EXPECT_EQ(models::head_chunk_rows_for(50257, 590 * mib), 384);     // 73.75 MiB: 6 x 64 rows of 12.3 MiB
  EXPECT_EQ(models::head_chunk_rows_for(24576, 8 * 48 * mib), 512);  // exactly 48 MiB
  EXPECT_EQ(models::head_chunk_rows_for(24577, 8 * 48 * mib), 448);  // a float past it
  EXPECT_EQ(models::head_chunk_rows_for(65, 0), models::head_chunk_rows_for(65));
  EXPECT_EQ(models::head_chunk_rows_for(1, size_t{1} << 40), 2147483584);  // 2^31 - 64: clamped to an int
}

// A character vocabulary's chunk holds every row of the step: one head product and one cross-entropy, so evaluate()
// after a training step finds every row's logits already planned (the arena does not grow), where GPT-2's vocabulary
// (TrainingArenaHoldsOneChunkOfLogits) grows by the rest of them.
TEST(HeadChunkMemory, ASmallVocabularyTakesEveryRowInOneChunk) {
  LanguageModelConfig c = large_vocab();
  c.vocab_size = 65;
  const int B = 4, T = 64, rows = B * T;
  const std::vector<int32_t> in = ids(rows, c.vocab_size, 1), tg = ids(rows, c.vocab_size, 2);
  LanguageModel m(c);
  m.train_step(in, tg, B, T);
  const size_t training = m.memory().activations;
  EXPECT_GE(training, static_cast<size_t>(rows) * c.vocab_size * sizeof(float));
  m.evaluate(in, tg, B, T);
  EXPECT_EQ(m.memory().activations, training);
}

// A packed (quantized) head is dequantized once per chunk each way, so its chunks are twice as long: a LoRA step on
// a q4 base holds (2 kHeadChunkRows, V) logits where the float32 base holds (kHeadChunkRows, V), and the q4 base's
// frozen backward adds the dequantized rows' scratch (256 rows of the head, the largest packed matrix).
TEST(HeadChunkMemory, APackedHeadTakesChunksTwiceAsLong) {
  const LanguageModelConfig c = large_vocab();
  const int B = 4, T = 64, rows = B * T;
  const std::vector<int32_t> in = ids(rows, c.vocab_size, 1), tg = ids(rows, c.vocab_size, 2);
  size_t arena[2] = {0, 0};
  for (const bool q4 : {false, true}) {
    LanguageModel m(c);
    if (q4) m.quantize(WeightFormat::Q4);
    LoraOptions o;
    o.rank = 2;
    o.targets = {"qkv"};
    m.add_lora(o);
    m.train_step(in, tg, B, T);
    arena[q4] = m.memory().activations;
  }
  const size_t more_logits = static_cast<size_t>(models::kHeadChunkRows) * c.vocab_size * sizeof(float);
  const size_t dequant_rows = static_cast<size_t>(256) * c.d_model * sizeof(float);
  EXPECT_NEAR(static_cast<double>(arena[1] - arena[0]), static_cast<double>(more_logits + dequant_rows), 4096.0);
}

// A refused loss (NonFinite::Error) in a step whose head backward ran with its loss leaves no gradient.
TEST(HeadChunkNonFinite, RefusedStepLeavesZeroGradients) {
  auto m = std::make_unique<LanguageModel>(config(false));
  const int B = 2, T = 7, V = 37;
  for (auto p : m->parameters())
    if (std::string(p.name) == "lm_head.weight") p.value[0] = std::numeric_limits<float>::infinity();
  const std::vector<int32_t> in = ids(B * T, V, 1), tg = ids(B * T, V, 2);
  EXPECT_THROW(m->train_step(in, tg, B, T), Error);
  for (auto p : m->parameters())
    for (float g : p.grad) ASSERT_EQ(g, 0.f) << p.name;
}

// LoRA without a "head" adapter: the head trains nothing, so accumulate's head runs once, d top made with the loss.
// Against the same model with a head adapter of zeros (the head's values and d top unchanged, bit for bit: + 0),
// which takes the path of a head that trains (its backward runs the head again once the loss is known), the losses
// and every gradient are the same bit for bit. A refused loss leaves the gradients accumulated before it as they were.
TEST(HeadChunkOnePass, AccumulateWithoutAHeadAdapterRunsTheHeadOnce) {
  const int B = 2, T = 7, V = 37;
  const auto make_lora = [](bool head) {
    auto m = std::make_unique<LanguageModel>(config(false));
    for (auto p : m->parameters())  // token 5's embedding: a batch holding it has a non-finite loss
      if (std::string(p.name) == "tok_emb.weight") p.value[5 * 8] = std::numeric_limits<float>::infinity();
    LoraOptions o;
    o.rank = 2;
    o.alpha = 3.f;
    o.targets = {"qkv", "out", "up", "down"};
    if (head) o.targets.push_back("head");
    o.seed = 9;
    m->add_lora(o);
    Rng rng(17);
    for (auto p : m->lora_parameters()) {
      const bool zero = std::string(p.name).rfind("lm_head", 0) == 0;
      for (float& x : p.value) x = zero ? 0.f : 0.3f * static_cast<float>(rng.uniform() * 2.0 - 1.0);
    }
    return m;
  };
  std::unique_ptr<LanguageModel> once = make_lora(false), twice = make_lora(true);
  std::vector<int32_t> in = ids(B * T, V, 1), tg = ids(B * T, V, 2), in2 = ids(B * T, V, 3), tg2 = ids(B * T, V, 4);
  for (auto* batch : {&in, &in2})
    for (int32_t& t : *batch) t = t == 5 ? 6 : t;
  EXPECT_EQ(once->forward_backward(in, tg, B, T), twice->forward_backward(in, tg, B, T));
  EXPECT_EQ(once->accumulate(in2, tg2, B, T, 0.5f), twice->accumulate(in2, tg2, B, T, 0.5f));
  const auto grads = [](LanguageModel& m) {
    std::vector<std::vector<float>> g;
    for (auto p : m.lora_parameters())
      if (std::string(p.name).rfind("lm_head", 0) != 0) g.emplace_back(p.grad.begin(), p.grad.end());
    return g;
  };
  const std::vector<std::vector<float>> before = grads(*once);
  ASSERT_EQ(before.size(), 4u * 2 * 2);  // A and B of 4 targets in 2 layers
  EXPECT_EQ(before, grads(*twice));
  // A batch holding token 5: its loss is not finite, refused (NonFinite::Error), and no gradient moved.
  std::vector<int32_t> bad = in;
  bad[3] = 5;
  EXPECT_THROW(once->accumulate(bad, tg, B, T, 1.f), Error);
  EXPECT_EQ(grads(*once), before);
}

TEST(HeadChunkBadInput, RowsMustNotBeNegative) {
  try {
    models::set_head_chunk_rows(-1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows = -1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(models::head_chunk_rows(), 0);  // unchanged: chunks sized by the vocabulary
}

}  // namespace
}  // namespace qkv::head_chunk_test
