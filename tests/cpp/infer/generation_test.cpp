// LanguageModel::Generation, one token per next(): exactly generate()'s tokens (greedy and sampled, with
// and without the KV cache, past the context, with stop tokens); stopping early leaves the model usable;
// other calls between two tokens (a forward pass, another generation, new weights) are allowed, and the
// tokens after new weights are those the new weights give for the sequence so far.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/language_model.h"
#include "test_util.h"

namespace qkv::generation_test {
namespace {

LanguageModelConfig config(uint64_t seed, int context) {
  LanguageModelConfig c;
  c.vocab_size = 11;
  c.context = context;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.seed = seed;
  return c;
}

// A model with far-apart logits (test_util.h), so that greedy choices do not rest on float rounding.
std::unique_ptr<LanguageModel> model(uint64_t seed, int context = 12) {
  auto lm = std::make_unique<LanguageModel>(config(seed, context));
  test::randomize_weights(*lm, seed);
  return lm;
}

SamplingOptions sampled(int n, bool cache) {
  SamplingOptions o;
  o.max_new_tokens = n;
  o.temperature = 1.1f;
  o.top_k = 6;
  o.top_p = 0.95f;
  o.repetition_penalty = 1.2f;
  o.seed = 21;
  o.use_cache = cache;
  return o;
}

SamplingOptions greedy(int n, bool cache) {
  SamplingOptions o;
  o.max_new_tokens = n;
  o.temperature = 0.f;
  o.use_cache = cache;
  return o;
}

// Up to `limit` tokens of g (all of them by default).
std::vector<int32_t> take(LanguageModel::Generation& g, int limit = 1 << 30) {
  std::vector<int32_t> out;
  for (std::optional<int32_t> t; static_cast<int>(out.size()) < limit && (t = g.next());) out.push_back(*t);
  return out;
}

TEST(Generation, NextGivesGeneratesTokensOneByOne) {
  auto lm = model(1);
  const std::vector<int32_t> short_prompt = {3, 1, 4}, long_prompt = {1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2};
  for (bool cache : {true, false})
    for (const auto* prompt : {&short_prompt, &long_prompt})
      for (const auto& o : {greedy(25, cache), sampled(25, cache)}) {  // 25 + 3 > context 12: the window slides
        const std::string what = std::string(cache ? "cache" : "no cache") + ", prompt of " +
                                 std::to_string(prompt->size()) + ", temperature " + std::to_string(o.temperature);
        const auto expected = lm->generate(*prompt, o);
        ASSERT_EQ(expected.size(), 25u) << what;
        auto g = lm->start_generation(*prompt, o);
        EXPECT_EQ(take(g), expected) << what;
        EXPECT_EQ(g.next(), std::nullopt) << what << ": an ended generation stays ended";
      }
}

TEST(Generation, StopTokensAndZeroTokensEndIt) {
  auto lm = model(2);
  const std::vector<int32_t> prompt = {2, 7};
  SamplingOptions o = sampled(30, true);
  const auto full = lm->generate(prompt, o);
  o.stop_tokens = {full[6]};
  const auto stopped = lm->generate(prompt, o);
  ASSERT_LE(stopped.size(), 7u);
  EXPECT_EQ(stopped.back(), full[6]);
  auto g = lm->start_generation(prompt, o);
  EXPECT_EQ(take(g), stopped);
  o.max_new_tokens = 0;
  auto none = lm->start_generation(prompt, o);
  EXPECT_EQ(none.next(), std::nullopt);
}

TEST(Generation, DroppingItEarlyLeavesTheModelUsable) {
  auto lm = model(3);
  const std::vector<int32_t> prompt = {5, 5, 1};
  const SamplingOptions o = sampled(40, true);
  const auto full = lm->generate(prompt, o);
  {
    auto g = lm->start_generation(prompt, o);
    EXPECT_EQ(take(g, 3), std::vector<int32_t>(full.begin(), full.begin() + 3));
  }
  EXPECT_EQ(lm->generate(prompt, o), full);
  const std::vector<int32_t> in = {1, 2, 3, 4}, tg = {2, 3, 4, 5};
  EXPECT_TRUE(std::isfinite(lm->train_step(in, tg, 1, 4)));
}

TEST(Generation, OtherCallsBetweenTwoTokensDoNotChangeItsTokens) {
  for (bool cache : {true, false})
    for (const auto& o : {greedy(30, cache), sampled(30, cache)}) {
      const std::string what =
          std::string(cache ? "cache" : "no cache") + ", temperature " + std::to_string(o.temperature);
      auto lm = model(4);
      const std::vector<int32_t> prompt = {8, 0, 3}, other = {1, 2, 3, 4, 5, 6, 7};
      const auto full = lm->generate(prompt, o);
      auto g = lm->start_generation(prompt, o);
      auto got = take(g, 5);
      lm->logits(other, 1, 7);                  // a full forward pass
      lm->generate(other, sampled(9, true));    // a generation that fills the KV cache with its own keys
      auto h = lm->start_generation(other, o);  // and one interleaved token by token
      const auto h_first = take(h, 2);
      const auto more = take(g, 10);
      got.insert(got.end(), more.begin(), more.end());
      const auto h_rest = take(h);
      const auto rest = take(g);
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_EQ(got, full) << what;
      auto h_all = h_first;
      h_all.insert(h_all.end(), h_rest.begin(), h_rest.end());
      EXPECT_EQ(h_all, lm->generate(other, o)) << what;
    }
}

TEST(Generation, NewWeightsBetweenTwoTokensAreUsedForTheRest) {
  for (bool cache : {true, false}) {
    // Context 32: the window never slides (which would re-run it and hide stale keys and values).
    auto a = model(5, 32), b = model(6, 32);
    const std::vector<int32_t> prompt = {4, 9, 2};
    auto g = a->start_generation(prompt, greedy(20, cache));
    const auto first = take(g, 4);
    a->load_weights(b->save(false));
    const auto rest = take(g);
    // What b makes from the sequence so far: the cached keys and values of a's weights were not reused.
    std::vector<int32_t> so_far = prompt;
    so_far.insert(so_far.end(), first.begin(), first.end());
    EXPECT_EQ(rest, b->generate(so_far, greedy(16, cache))) << (cache ? "cache" : "no cache");
    // And the weights matter: a's own continuation differs.
    const auto unchanged = model(5, 32)->generate(prompt, greedy(20, cache));
    EXPECT_NE(rest, std::vector<int32_t>(unchanged.begin() + 4, unchanged.end()));
  }
}

TEST(Generation, RejectsBadArgumentsLikeGenerate) {
  auto lm = model(7);
  const std::vector<int32_t> empty, bad = {1, 11};
  EXPECT_NE(test::message_of([&] { lm->start_generation(empty, greedy(3, true)); }).find("prompt is empty"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] { lm->start_generation(bad, greedy(3, true)); }).find("prompt[1] = 11"),
            std::string::npos);
  SamplingOptions o = greedy(3, true);
  o.top_p = 0.f;
  const std::vector<int32_t> one = {1};
  EXPECT_NE(test::message_of([&] { lm->start_generation(one, o); }).find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace qkv::generation_test
