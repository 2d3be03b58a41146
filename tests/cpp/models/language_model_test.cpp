// LanguageModel: it learns, it is deterministic, and bad input is refused with a clear qkv::Error that
// leaves the model usable.
#include "qkv/language_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "qkv/error.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::language_model_test {
namespace {

LanguageModelConfig small_config() {
  LanguageModelConfig c;
  c.vocab_size = 8;
  c.context = 16;
  c.d_model = 32;
  c.heads = 4;
  c.layers = 2;
  return c;
}

// (batch, context) windows of the repeating pattern 0 1 2 ... 7 0 1 ..., each starting at offset b.
void pattern_batch(std::vector<int32_t>& in, std::vector<int32_t>& tg, int B, int T, int V, int step) {
  in.resize(static_cast<size_t>(B) * T);
  tg.resize(in.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      in[b * T + t] = (b + step + t) % V;
      tg[b * T + t] = (b + step + t + 1) % V;
    }
}

using test::message_of;

TEST(LanguageModel, LossFallsOnARepeatingPatternAndGreedyContinuesIt) {
  OptimizerConfig opt;
  opt.lr = 3e-3f;
  LanguageModel lm(small_config(), opt);
  std::vector<int32_t> in, tg;
  const int B = 4, T = 16;
  pattern_batch(in, tg, B, T, 8, 0);
  const float first = lm.train_step(in, tg, B, T);
  EXPECT_NEAR(first, std::log(8.f), 0.3f);  // an untrained model is near uniform
  float last = first;
  for (int s = 1; s < 150; ++s) {
    pattern_batch(in, tg, B, T, 8, s);
    last = lm.train_step(in, tg, B, T);
  }
  EXPECT_LT(last, 0.05f) << "first loss " << first;
  EXPECT_EQ(lm.step(), 150);
  const std::vector<int32_t> prompt = {3, 4, 5};
  const auto out = lm.generate(prompt, 20, 0.f, 1);  // 20 tokens: the window slides past context 16
  ASSERT_EQ(out.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(out[i], (6 + i) % 8) << "token " << i;
}

TEST(LanguageModel, SameSeedSameResultAndThreadCountDoesNotChangeIt) {
  std::vector<int32_t> in, tg;
  pattern_batch(in, tg, 3, 12, 8, 1);
  std::vector<float> losses[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::min(2, max_threads()));
    LanguageModel lm(small_config());
    for (int s = 0; s < 5; ++s) losses[run].push_back(lm.train_step(in, tg, 3, 12));
  }
  for (int s = 0; s < 5; ++s) EXPECT_EQ(losses[0][s], losses[1][s]) << "step " << s;
}

TEST(LanguageModel, SamplingIsReproducibleFromTheSeed) {
  LanguageModel lm(small_config());
  const std::vector<int32_t> prompt = {1};
  const auto a = lm.generate(prompt, 30, 1.f, 42), b = lm.generate(prompt, 30, 1.f, 42);
  const auto c = lm.generate(prompt, 30, 1.f, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 8);
  EXPECT_TRUE(lm.generate(prompt, 0, 1.f, 1).empty());
}

TEST(LanguageModel, RejectsBadConfigsNamingTheField) {
  auto make = [](auto edit) {
    return message_of([&] {
      auto c = small_config();
      edit(c);
      LanguageModel lm(c);
    });
  };
  EXPECT_NE(make([](auto& c) { c.d_model = 30; }).find("d_model = 30 must be divisible by heads = 4"),
            std::string::npos);
  EXPECT_NE(make([](auto& c) { c.vocab_size = 0; }).find("vocab_size = 0"), std::string::npos);
  EXPECT_NE(make([](auto& c) { c.context = -1; }).find("context = -1"), std::string::npos);
  EXPECT_NE(make([](auto& c) { c.layers = 0; }).find("layers = 0"), std::string::npos);
  EXPECT_NE(make([](auto& c) { c.heads = 0; }).find("heads = 0"), std::string::npos);
  OptimizerConfig bad;
  bad.lr = -1.f;
  EXPECT_NE(message_of([&] { LanguageModel lm(small_config(), bad); }).find("lr = -1"), std::string::npos);
}

// A sinusoidal table too big to allocate (a mistyped context) is a qkv::Error naming its size, not std::bad_alloc:
// 32 TiB, which no machine's memory and swap hold (the kernel's default overcommit refuses it). Not under
// AddressSanitizer, whose allocator reports such a request as a fatal error instead of failing it.
TEST(LanguageModel, ASinusoidalTableTooBigIsRefusedNamingItsSize) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts on the allocation this test makes fail";
#else
  auto c = small_config();
  c.positions = Positions::Sinusoidal;
  c.context = 1 << 30;
  c.d_model = 8192;
  c.heads = 2;
  const std::string e = message_of([&] { LanguageModel lm(c); });
  EXPECT_NE(e.find("out of memory: could not allocate 35184372088832 bytes for the sinusoidal position table (context "
                   "1073741824 x d_model 8192)"),
            std::string::npos)
      << e;
#endif
}

TEST(LanguageModel, RejectsBadBatchesAndStaysUsable) {
  LanguageModel lm(small_config());
  std::vector<int32_t> in, tg;
  pattern_batch(in, tg, 2, 8, 8, 0);
  const double before = lm.evaluate(in, tg, 2, 8).loss;

  auto bad_in = in;
  bad_in[3] = 99;
  EXPECT_NE(message_of([&] {
              lm.train_step(bad_in, tg, 2, 8);
            }).find("inputs[3] = 99 is out of range: expected a token id in [0, 8)"),
            std::string::npos);
  auto bad_tg = tg;
  bad_tg[0] = -1;
  EXPECT_NE(message_of([&] { lm.train_step(in, bad_tg, 2, 8); }).find("targets[0] = -1"), std::string::npos);
  EXPECT_NE(message_of([&] { lm.train_step(in, tg, 0, 8); }).find("batch = 0"), std::string::npos);
  EXPECT_NE(message_of([&] { lm.train_step(in, tg, 1, 17); }).find("seq = 17"), std::string::npos);
  EXPECT_NE(message_of([&] { lm.train_step(in, tg, 4, 8); }).find("inputs has 16 tokens"), std::string::npos);
  EXPECT_NE(message_of([&] { lm.generate({}, 5, 1.f, 1); }).find("prompt is empty"), std::string::npos);
  const std::vector<int32_t> p = {1};
  EXPECT_NE(message_of([&] { lm.generate(p, -2, 1.f, 1); }).find("max_tokens = -2"), std::string::npos);
  EXPECT_NE(message_of([&] { lm.generate(p, 2, NAN, 1); }).find("temperature"), std::string::npos);

  EXPECT_EQ(lm.step(), 0);  // nothing was applied
  EXPECT_EQ(lm.evaluate(in, tg, 2, 8).loss, before);
  EXPECT_TRUE(std::isfinite(lm.train_step(in, tg, 2, 8)));
}

TEST(LanguageModel, NonFiniteLossStopsTheStepAndKeepsTheWeights) {
  LanguageModel lm(small_config());
  std::vector<int32_t> in, tg;
  pattern_batch(in, tg, 2, 8, 8, 0);
  auto params = lm.parameters();
  params[0].value[0] = INFINITY;  // a poisoned embedding row
  std::vector<float> snapshot;
  for (auto& p : params) snapshot.insert(snapshot.end(), p.value.begin(), p.value.end());
  EXPECT_NE(message_of([&] { lm.train_step(in, tg, 2, 8); }).find("is not finite"), std::string::npos);
  size_t k = 0;
  for (auto& p : params)
    for (float v : p.value) {
      const float s = snapshot[k++];
      ASSERT_TRUE(v == s || (std::isnan(v) && std::isnan(s)));
    }
  EXPECT_EQ(lm.step(), 0);
}

// memory(): the parameter side is fixed at construction; the activation arena is planned for the largest
// batch x sequence seen, so it is empty before the first step, grows with a larger batch and then stays.
TEST(LanguageModel, MemoryReportsWeightsStateAndTheActivationArena) {
  LanguageModel lm(small_config());
  const size_t weights = lm.num_parameters() * sizeof(float);
  MemoryUsage m = lm.memory();
  EXPECT_EQ(m.parameters, weights);
  EXPECT_EQ(m.gradients, weights);
  EXPECT_EQ(m.optimizer, 2 * weights);
  std::vector<int32_t> in, tg;
  pattern_batch(in, tg, 2, 16, 8, 0);
  lm.train_step(in, tg, 2, 16);
  const size_t small = lm.memory().activations;
  // At least the residual stream and its gradient: 2 x (B*T*C) floats per layer.
  EXPECT_GE(small, 2u * 2 * 16 * 32 * 2 * sizeof(float));
  pattern_batch(in, tg, 8, 16, 8, 0);
  lm.train_step(in, tg, 8, 16);
  const size_t large = lm.memory().activations;
  EXPECT_GT(large, 3 * small);
  pattern_batch(in, tg, 2, 16, 8, 0);
  lm.train_step(in, tg, 2, 16);
  EXPECT_EQ(lm.memory().activations, large);
  EXPECT_EQ(lm.memory().total(), 4 * weights + large);
}

// Generation with the KV cache plans the arena for the positions a step feeds (the prompt, then one), not for
// the context, and logits for each sequence's last position only: a forward of the prompt alone plans its other
// positions' logits too, and the no-cache arena is the context's window. Past the context the window slides and the
// arena grows to it (still one row of logits); the tokens match the no-cache run.
TEST(LanguageModel, CachedGenerationPlansForThePromptNotTheContext) {
  const std::vector<int32_t> prompt = {1, 2, 3};
  SamplingOptions cached;
  cached.temperature = 0;
  cached.max_new_tokens = 4;
  LanguageModel a(small_config());
  const auto tokens = a.generate(prompt, cached);
  ASSERT_EQ(tokens.size(), 4u);
  const size_t after_cached = a.memory().activations;

  LanguageModel b(small_config());
  b.logits(prompt, 1, static_cast<int>(prompt.size()));
  const size_t other_logits = (prompt.size() - 1) * static_cast<size_t>(small_config().vocab_size) * sizeof(float);
  EXPECT_LT(after_cached, b.memory().activations);
  EXPECT_GE(b.memory().activations - after_cached, other_logits);

  SamplingOptions plain = cached;
  plain.use_cache = false;
  LanguageModel c(small_config());
  EXPECT_EQ(c.generate(prompt, plain), tokens);
  EXPECT_GT(c.memory().activations, after_cached);

  // 20 new tokens from 3: the window (context 16) slides, the cache starts over with 16 positions.
  cached.max_new_tokens = plain.max_new_tokens = 20;
  EXPECT_EQ(a.generate(prompt, cached), c.generate(prompt, plain));
  EXPECT_GT(a.memory().activations, after_cached);
  EXPECT_GE(c.memory().activations - a.memory().activations,
            14 * static_cast<size_t>(small_config().vocab_size) * sizeof(float));  // the window's other 15 rows,
                                                                                   // less the arena's alignment
}

// The KV cache holds the positions a generation feeds (prompt + max_new_tokens - 1, at most the context), not the
// whole context: the tokens are those without the cache for every length around the context's 16, interleaved
// Generations (each rebuilding its cache at its own size) included.
TEST(LanguageModel, CachedGenerationSizesItsCacheForThePromptAndNewTokens) {
  LanguageModel cached_model(small_config()), plain_model(small_config());
  const auto run = [](LanguageModel& m, const std::vector<int32_t>& prompt, int n, bool use_cache) {
    SamplingOptions o;
    o.temperature = 0;
    o.max_new_tokens = n;
    o.use_cache = use_cache;
    return m.generate(prompt, o);
  };
  const std::vector<int32_t> three = {1, 2, 3}, sixteen(16, 5);
  for (const auto& [prompt, n] : std::vector<std::pair<std::vector<int32_t>, int>>{
           {three, 1}, {three, 13}, {three, 14}, {three, 2}, {sixteen, 1}, {sixteen, 3}, {three, 30}, {three, 5}}) {
    const auto want = run(plain_model, prompt, n, false);
    ASSERT_EQ(want.size(), static_cast<size_t>(n));
    EXPECT_EQ(run(cached_model, prompt, n, true), want) << prompt.size() << " + " << n;
  }
  SamplingOptions small, large;
  small.temperature = large.temperature = 0;
  small.max_new_tokens = 4;
  large.max_new_tokens = 12;
  auto a = cached_model.start_generation(three, small);
  auto b = cached_model.start_generation(three, large);
  std::vector<int32_t> got_a, got_b;
  for (int i = 0; i < 12; ++i) {
    if (auto t = a.next()) got_a.push_back(*t);
    if (auto t = b.next()) got_b.push_back(*t);
  }
  EXPECT_EQ(got_a, run(plain_model, three, 4, false));
  EXPECT_EQ(got_b, run(plain_model, three, 12, false));
}

TEST(LanguageModel, ParameterCountAndNames) {
  const auto c = small_config();
  LanguageModel lm(c);
  const size_t C = 32, F = 128, per_layer = 2 * (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (F * C + F) + (C * F + C);
  EXPECT_EQ(lm.num_parameters(), 8 * C + 16 * C + 2 * per_layer + 2 * C);
  EXPECT_STREQ(lm.parameters()[0].name, "tok_emb.weight");
  EXPECT_STREQ(lm.parameters()[2].name, "layers.0.self_attn.in_proj_weight");
  EXPECT_STREQ(lm.parameters().back().name, "norm.bias");
}

}  // namespace
}  // namespace qkv::language_model_test
