// The KV cache: generation with it gives exactly the tokens, and the logits to 1e-5, of generation that
// re-runs the whole window per token (SamplingOptions::use_cache = false), across the layer variants, prompts
// shorter and longer than the context, generation past the context (the window slides), batches and
// sampling. Also: a batched row equals the single-prompt call with its seed, and the caches' beam reorder.
#include "infer/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ops/ops.h"
#include "qkv/language_model.h"
#include "test_util.h"

namespace qkv::kv_cache_test {
namespace {

struct Generated {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;  // per row, the logits of each step, concatenated
};

Generated run(LanguageModel& lm, const std::vector<int32_t>& prompts, int batch, const SamplingOptions& o) {
  Generated r;
  r.logits.resize(static_cast<size_t>(batch));
  r.tokens = lm.generate(prompts, batch, static_cast<int>(prompts.size()) / batch, o,
                         [&](int row, int32_t, std::span<const float> z) {
                           auto& l = r.logits[static_cast<size_t>(row)];
                           l.insert(l.end(), z.begin(), z.end());
                           return true;
                         });
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

struct LmCase {
  std::string name;
  NormPosition norm;
  Positions positions;
  bool bias, tie, final_norm;
  Activation act;
  int context, prompt_len, batch, new_tokens;
  float temperature;
};

TEST(KvCache, LanguageModelCachedEqualsUncached) {
  const LmCase cases[] = {
      {"gpt pre-LN, short prompt", NormPosition::Pre, Positions::Learned, false, true, true, Activation::GELU, 32, 3, 1,
       20, 0.f},
      {"post-LN sinusoidal, bias, untied", NormPosition::Post, Positions::Sinusoidal, true, false, false,
       Activation::ReLU, 24, 5, 2, 15, 0.f},
      {"past the context (slides)", NormPosition::Pre, Positions::Learned, true, true, true, Activation::GELU, 12, 4, 1,
       25, 0.f},
      {"prompt longer than the context", NormPosition::Pre, Positions::Sinusoidal, false, true, true, Activation::GELU,
       10, 14, 2, 8, 0.f},
      {"batch 3, sampled", NormPosition::Pre, Positions::Learned, true, true, true, Activation::GELU, 80, 7, 3, 70,
       1.f},
      {"one-token prompt, context 67 (tiles)", NormPosition::Post, Positions::Learned, true, true, true,
       Activation::GELU, 67, 1, 2, 66, 0.9f},
  };
  for (const LmCase& c : cases) {
    LanguageModelConfig cfg;
    cfg.vocab_size = 13;
    cfg.context = c.context;
    cfg.d_model = 24;
    cfg.heads = 3;
    cfg.layers = 2;
    cfg.norm = c.norm;
    cfg.positions = c.positions;
    cfg.bias = c.bias;
    cfg.tie_head = c.tie;
    cfg.final_norm = c.final_norm;
    cfg.activation = c.act;
    LanguageModel lm(cfg);
    test::randomize_weights(lm, 17);
    std::vector<int32_t> prompts(static_cast<size_t>(c.batch) * c.prompt_len);
    for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = static_cast<int32_t>((i * 7 + 3) % 13);
    SamplingOptions o;
    o.max_new_tokens = c.new_tokens;
    o.temperature = c.temperature;
    o.seed = 5;
    o.use_cache = false;
    const Generated want = run(lm, prompts, c.batch, o);
    o.use_cache = true;
    const Generated got = run(lm, prompts, c.batch, o);
    for (int b = 0; b < c.batch; ++b) {
      const size_t r = static_cast<size_t>(b);
      EXPECT_EQ(got.tokens[r], want.tokens[r]) << c.name << ", row " << b;
      EXPECT_EQ(got.tokens[r].size(), static_cast<size_t>(c.new_tokens)) << c.name;
      EXPECT_LE(max_diff(got.logits[r], want.logits[r]), 1e-5) << c.name << ", row " << b;
    }
  }
}

// The attention's scratch grows with the keys a query sees, and a cached step's keys are the cache's, not the few
// positions it feeds: planned for those alone, a one-head model (one scratch slot) decoding from a one-token prompt
// ran out of scratch once the cache held more keys than the CPU's first tile (16), on the reference executor too.
// Both executors, cached against uncached.
TEST(KvCache, AShortPromptPlansTheAttentionForTheCachesKeys) {
  LanguageModel trained(LanguageModelConfig{.vocab_size = 13, .context = 80, .d_model = 16, .heads = 1, .layers = 2});
  test::randomize_weights(trained, 23);
  const std::vector<uint8_t> bytes = trained.save();
  for (const bool reference : {false, true}) {
    for (const int prompt_len : {1, 2}) {
      // A model fresh from the bytes for each case: the cached generation runs first, on a workspace no earlier
      // call has planned (an uncached one plans for the whole context).
      const bool before = ops::set_cpu_reference(reference);
      const auto lm = LanguageModel::load(bytes);
      ops::set_cpu_reference(before);
      const std::vector<int32_t> prompt(static_cast<size_t>(prompt_len), 4);
      SamplingOptions o;
      o.max_new_tokens = 70;
      o.temperature = 0.f;
      o.use_cache = true;
      const Generated got = run(*lm, prompt, 1, o);
      o.use_cache = false;
      const Generated want = run(*lm, prompt, 1, o);
      const char* name = reference ? "reference" : "cpu";
      ASSERT_EQ(got.tokens[0].size(), 70u) << name;
      EXPECT_EQ(got.tokens[0], want.tokens[0]) << name << ", prompt " << prompt_len;
      EXPECT_LE(max_diff(got.logits[0], want.logits[0]), 1e-5) << name << ", prompt " << prompt_len;
    }
  }
}

// Cached generation makes only each sequence's last logits, so its workspace holds no (window x vocabulary) logits: a
// whole-window prompt on a model with a large vocabulary plans about what a one-token prompt plans (its stack's
// activations grow with the window, its logits do not), the tokens those of uncached generation.
TEST(KvCache, ALongPromptPlansNoWholeWindowOfLogits) {
  const LanguageModelConfig c{.vocab_size = 4000, .context = 64, .d_model = 16, .heads = 2, .layers = 1};
  LanguageModel trained(c);
  test::randomize_weights(trained, 5);
  const std::vector<uint8_t> bytes = trained.save();
  SamplingOptions o;
  o.max_new_tokens = 3;
  o.temperature = 0.f;
  const auto one = LanguageModel::load(bytes), whole = LanguageModel::load(bytes);
  run(*one, {7}, 1, o);
  std::vector<int32_t> prompt(64);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 37 % 4000);
  const Generated got = run(*whole, prompt, 1, o);
  const size_t window_logits = 64 * 4000 * sizeof(float);  // 1 MB
  EXPECT_LT(whole->memory().activations, one->memory().activations + window_logits / 4)
      << one->memory().activations << " for one token";
  o.use_cache = false;
  const auto uncached = LanguageModel::load(bytes);
  EXPECT_EQ(got.tokens[0], run(*uncached, prompt, 1, o).tokens[0]);
}

// A row of a batch is the single-prompt generation with the seed options.seed + row, with or without the
// cache; a stop token ends only its own row.
TEST(KvCache, BatchedRowsEqualSinglePromptGeneration) {
  LanguageModelConfig cfg;
  cfg.vocab_size = 11;
  cfg.context = 16;
  cfg.d_model = 16;
  cfg.heads = 2;
  cfg.layers = 2;
  LanguageModel lm(cfg);
  test::randomize_weights(lm, 3);
  const std::vector<int32_t> prompts = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1};  // (3, 4)
  SamplingOptions o;
  o.max_new_tokens = 30;
  o.temperature = 1.1f;
  o.top_k = 5;
  o.repetition_penalty = 1.2f;
  o.seed = 40;
  o.stop_tokens = {3};
  for (bool cache : {true, false}) {
    o.use_cache = cache;
    const auto rows = lm.generate(prompts, 3, 4, o);
    bool some_stopped = false;
    for (int b = 0; b < 3; ++b) {
      SamplingOptions single = o;
      single.seed = o.seed + static_cast<uint64_t>(b);
      const std::vector<int32_t> prompt(prompts.begin() + b * 4, prompts.begin() + b * 4 + 4);
      EXPECT_EQ(rows[static_cast<size_t>(b)], lm.generate(prompt, single)) << "row " << b << " cache " << cache;
      some_stopped = some_stopped || rows[static_cast<size_t>(b)].size() < 30u;
    }
    EXPECT_TRUE(some_stopped) << "the case should exercise a row stopping early";
  }
}

TEST(KvCache, BatchedGenerateRejectsBadShapes) {
  LanguageModelConfig cfg;
  cfg.vocab_size = 7;
  cfg.context = 8;
  cfg.d_model = 8;
  cfg.heads = 2;
  cfg.layers = 1;
  LanguageModel lm(cfg);
  const std::vector<int32_t> p = {1, 2, 3, 4, 5, 6};
  SamplingOptions o;
  o.max_new_tokens = 2;
  EXPECT_NE(test::message_of([&] { lm.generate(p, 4, 2, o); }).find("prompts has 6 tokens"), std::string::npos);
  EXPECT_NE(test::message_of([&] { lm.generate(p, 0, 6, o); }).find("batch = 0"), std::string::npos);
  EXPECT_NE(test::message_of([&] { lm.generate(p, 6, 0, o); }).find("prompt_len = 0"), std::string::npos);
  const std::vector<int32_t> bad = {1, 9};
  EXPECT_NE(test::message_of([&] { lm.generate(bad, 1, 2, o); }).find("prompts[1] = 9 is out of range"),
            std::string::npos);
}

// reorder: row r takes row parents[r]'s filled positions in every layer; unfilled positions do not move.
TEST(KvCache, ReorderGathersRows) {
  infer::KvCaches caches;
  const int L = 2, R = 3, T = 4, C = 2;
  caches.reset(ops::backend(Device::CPU), L, R, T, C);
  for (nn::KvCache& c : caches.layers()) {
    c.length = 2;
    for (int i = 0; i < R * T * 2 * C; ++i) c.kv[i] = static_cast<float>(i);
  }
  const std::vector<int32_t> parents = {2, 0, 0};
  caches.reorder(parents);
  const int row = T * 2 * C, used = 2 * 2 * C;
  for (nn::KvCache& c : caches.layers())
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < row; ++i) {
        const float want = static_cast<float>(i < used ? parents[static_cast<size_t>(r)] * row + i : r * row + i);
        ASSERT_EQ(c.kv[r * row + i], want) << "row " << r << " element " << i;
      }
  EXPECT_NE(test::message_of([&] {
              caches.reorder(std::vector<int32_t>{0, 3, 1});
            }).find("parents[1] = 3"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::kv_cache_test
