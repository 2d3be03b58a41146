// Sampling: greedy, temperature, top-k, top-p, repetition penalty, seeds, stop tokens and streaming, and
// the options' validation. Frequencies are checked against the renormalised probabilities with a bound
// of 5 standard deviations of a binomial proportion, sqrt(p (1 - p) / N): the draws are seeded, so each
// test is one fixed outcome, and a correct sampler lands outside it with probability below 1e-6.
#include "qkv/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/language_model.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::sampling_test {
namespace {

using test::message_of;

SamplingOptions with_temperature(float t) {
  SamplingOptions o;
  o.temperature = t;
  return o;
}

// softmax(z / t) in double.
std::vector<double> softmax(const std::vector<double>& z, double t = 1.0) {
  const double mx = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double sum = 0.0;
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp((z[i] - mx) / t);
  for (double& x : p) x /= sum;
  return p;
}

// Draws n tokens with u from a seeded generator; returns the count of each token.
std::vector<int> histogram(const std::vector<float>& logits, const SamplingOptions& o, int n, uint64_t seed) {
  std::vector<int> counts(logits.size(), 0);
  Rng rng(seed);
  for (int i = 0; i < n; ++i) ++counts[sample_token(logits, {}, o, rng.uniform())];
  return counts;
}

// Every token's frequency within 5 sigma of p (and exactly 0 where p is 0).
void expect_frequencies(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  ASSERT_EQ(counts.size(), p.size());
  for (size_t v = 0; v < p.size(); ++v) {
    if (p[v] == 0.0) {
      EXPECT_EQ(counts[v], 0) << "token " << v << " is outside the support but was drawn";
      continue;
    }
    const double f = static_cast<double>(counts[v]) / n, bound = 5.0 * std::sqrt(p[v] * (1.0 - p[v]) / n);
    EXPECT_NEAR(f, p[v], bound) << "token " << v;
  }
}

TEST(Sampling, GreedyIsTheArgmaxAndTakesTheLowestIdOnTies) {
  const auto logits = test::randn(50, 3);
  const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (double u : {0.0, 0.3, 0.999}) EXPECT_EQ(sample_token(logits, {}, with_temperature(0.f), u), best);
  EXPECT_EQ(sample_token(std::vector<float>{1.f, 3.f, 0.f, 3.f}, {}, with_temperature(0.f), 0.5), 1);
  const auto p = sampling_distribution(logits, {}, with_temperature(0.f));
  EXPECT_EQ(p[best], 1.0);
}

// The greedy pick scans the logits in blocks of 64 (the largest value first, then the first block that holds it):
// std::max_element's answer at every length around the block, with the maximum in a whole block, in the tail, at the
// ends, tied across blocks, among all-negative logits and as -0 against +0 (equal: the lower id), and the largest
// value also setting the temperature's scale (a single token at any temperature).
TEST(Sampling, GreedyMatchesMaxElementAtEveryLengthAndPlace) {
  const SamplingOptions greedy = with_temperature(0.f);
  for (int V : {1, 2, 3, 63, 64, 65, 127, 128, 129, 200, 50257}) {
    auto logits = test::randn(static_cast<size_t>(V), 700 + V, 4.f);
    std::vector<int> places = {0, V - 1, V / 2, V / 3};
    if (V > 64) places.push_back(64), places.push_back(V - V % 64);
    for (const int at : places) {
      if (at < 0 || at >= V) continue;
      auto z = logits;
      for (float& x : z) x = -std::fabs(x) - 1.f;  // all negative
      const auto expect = [&](const char* what) {
        const int32_t best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
        EXPECT_EQ(sample_token(z, {}, greedy, 0.5), best) << what << ", V = " << V << ", at " << at;
        EXPECT_EQ(sampling_distribution(z, {}, greedy)[static_cast<size_t>(best)], 1.0) << what << ", V = " << V;
      };
      expect("all negative");
      z[static_cast<size_t>(at)] = -0.5f;
      expect("a negative maximum");
      z[static_cast<size_t>(at)] = 7.f;
      z[static_cast<size_t>(V - 1)] = std::max(z[static_cast<size_t>(V - 1)], 7.f);
      expect("a tie with the last");
      for (float& x : z) x = std::min(x, -1.f);
      z[static_cast<size_t>(at)] = 0.f;
      z[static_cast<size_t>(V - 1 - (V - 1 - at) / 2)] = -0.f;
      expect("+0 and -0");
      z[static_cast<size_t>(at)] = -0.f;
      z[static_cast<size_t>(V - 1 - (V - 1 - at) / 2)] = 0.f;
      expect("-0 and +0");
    }
  }
  // The largest value is also exp's offset: one token far above the rest takes all the mass at any temperature.
  auto z = test::randn(300, 9, 1.f);
  z[173] = 500.f;
  EXPECT_EQ(sampling_distribution(z, {}, with_temperature(1.f))[173], 1.0);
  EXPECT_EQ(sample_token(z, {}, with_temperature(1.f), 0.999), 173);
}

TEST(Sampling, TopK1IsGreedyAtAnyTemperature) {
  Rng rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    auto logits = test::randn(37, 100 + trial, 3.f);
    if (trial == 0) logits[4] = logits[9] = 100.f;  // a tie: the lower id
    const int32_t greedy = sample_token(logits, {}, with_temperature(0.f), 0.0);
    SamplingOptions o = with_temperature(2.f);
    o.top_k = 1;
    for (int i = 0; i < 10; ++i) EXPECT_EQ(sample_token(logits, {}, o, rng.uniform()), greedy) << "trial " << trial;
  }
}

TEST(Sampling, TemperatureFollowsTheSoftmax) {
  const std::vector<double> z = {0.5, -1.0, 2.0, 0.0, 1.0};
  const std::vector<float> logits(z.begin(), z.end());
  const int n = 40000;
  expect_frequencies(histogram(logits, with_temperature(1.f), n, 11), softmax(z, 1.0), n);
  expect_frequencies(histogram(logits, with_temperature(0.5f), n, 12), softmax(z, 0.5), n);
}

TEST(Sampling, TopKKeepsTheKMostProbableRenormalised) {
  const std::vector<double> z = {1.0, 3.0, -2.0, 2.5, 0.0, 2.0, -1.0, 0.5};  // top 3: ids 1, 3, 5
  const std::vector<float> logits(z.begin(), z.end());
  SamplingOptions o = with_temperature(1.f);
  o.top_k = 3;
  const auto full = softmax(z);
  std::vector<double> p(z.size(), 0.0);
  const double kept = full[1] + full[3] + full[5];
  for (int v : {1, 3, 5}) p[v] = full[v] / kept;
  const auto dist = sampling_distribution(logits, {}, o);
  for (size_t v = 0; v < p.size(); ++v) EXPECT_NEAR(dist[v], p[v], 1e-12) << "token " << v;
  const int n = 30000;
  expect_frequencies(histogram(logits, o, n, 21), p, n);
  o.top_k = 100;  // larger than V: everything
  EXPECT_EQ(sampling_distribution(logits, {}, o), sampling_distribution(logits, {}, with_temperature(1.f)));
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingTheMass) {
  // Probabilities 1/2, 1/4, 1/8, 1/16, 1/16 (ids in shuffled order).
  const std::vector<double> p_full = {0.0625, 0.25, 0.5, 0.0625, 0.125};
  std::vector<float> logits;
  for (double p : p_full) logits.push_back(static_cast<float>(std::log(p)));
  SamplingOptions o = with_temperature(1.f);
  const int n = 30000;
  o.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: ids 2 and 1
  std::vector<double> expect = {0.0, 1.0 / 3, 2.0 / 3, 0.0, 0.0};
  const auto dist = sampling_distribution(logits, {}, o);
  for (size_t v = 0; v < expect.size(); ++v) EXPECT_NEAR(dist[v], expect[v], 1e-6) << "token " << v;
  expect_frequencies(histogram(logits, o, n, 31), expect, n);
  o.top_p = 0.8f;  // 0.75 < 0.8 <= 0.875: ids 2, 1, 4
  expect = {0.0, 0.25 / 0.875, 0.5 / 0.875, 0.0, 0.125 / 0.875};
  expect_frequencies(histogram(logits, o, n, 32), expect, n);
  o.top_p = 0.1f;  // below the first token's mass: that token alone
  expect_frequencies(histogram(logits, o, 1000, 33), {0, 0, 1, 0, 0}, 1000);
  // After top-k = 2 (ids 2, 1 renormalised to 2/3, 1/3), top-p 0.6 keeps id 2 only.
  o.top_k = 2;
  o.top_p = 0.6f;
  expect_frequencies(histogram(logits, o, 1000, 34), {0, 0, 1, 0, 0}, 1000);
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  // Hand-computed: penalty 2 on ids 0 and 1 (1 appears twice, penalised once): [2, -1, 0.5, 3] -> [1, -2, 0.5, 3].
  const std::vector<float> logits = {2.f, -1.f, 0.5f, 3.f};
  const std::vector<int32_t> context = {0, 1, 1};
  SamplingOptions o = with_temperature(1.f);
  o.repetition_penalty = 2.f;
  const auto expect = softmax({1.0, -2.0, 0.5, 3.0});
  const auto dist = sampling_distribution(logits, context, o);
  for (size_t v = 0; v < expect.size(); ++v) EXPECT_NEAR(dist[v], expect[v], 1e-12) << "token " << v;
  // Greedy sees the penalty too: [2, -1, 1.5, 0] with 0 in the context -> [1, -1, 1.5, 0] picks id 2.
  o.temperature = 0.f;
  const std::vector<float> greedy_logits = {2.f, -1.f, 1.5f, 0.f};
  EXPECT_EQ(sample_token(greedy_logits, {}, o, 0.0), 0);
  EXPECT_EQ(sample_token(greedy_logits, std::vector<int32_t>{0}, o, 0.0), 2);
  // A penalty below 1 favours repeats: 2 * 2 = 4 beats 3.
  o.repetition_penalty = 0.5f;
  EXPECT_EQ(sample_token(std::vector<float>{2.f, 3.f}, std::vector<int32_t>{0}, o, 0.0), 0);
}

TEST(Sampling, BadOptionsAreRefusedNamingTheField) {
  const std::vector<float> logits = {0.f, 1.f};
  const auto refused = [&](SamplingOptions o, const std::string& text) {
    const std::string m = message_of([&] { sample_token(logits, {}, o, 0.5); });
    EXPECT_NE(m.find(text), std::string::npos) << m;
  };
  SamplingOptions o;
  o.temperature = -1.f;
  refused(o, "temperature = -1 is invalid: expected a finite number >= 0");
  o.temperature = NAN;
  refused(o, "temperature = nan");
  o = {};
  o.top_k = -3;
  refused(o, "top_k = -3 is invalid: expected an integer >= 0");
  o = {};
  o.top_p = 0.f;
  refused(o, "top_p = 0 is invalid: expected 0 < top_p <= 1");
  o.top_p = 1.5f;
  refused(o, "top_p = 1.5");
  o = {};
  o.repetition_penalty = 0.f;
  refused(o, "repetition_penalty = 0 is invalid: expected a finite number > 0");
  o.repetition_penalty = INFINITY;
  refused(o, "repetition_penalty = inf");
  o = {};
  o.max_new_tokens = -1;
  refused(o, "max_new_tokens = -1 is invalid: expected an integer >= 0");
  o = {};
  o.stop_tokens = {1, 7};
  EXPECT_NE(message_of([&] { validate(o, 5); }).find("stop_tokens[1] = 7 is out of range"), std::string::npos);
  EXPECT_NE(message_of([&] { sample_token(logits, {}, {}, 1.0); }).find("u = 1 is invalid"), std::string::npos);
  EXPECT_NE(message_of([&] {
              sample_token(std::vector<float>{0.f, NAN}, {}, {}, 0.5);
            }).find("logits[1] = nan"),
            std::string::npos);
  EXPECT_NE(message_of([&] { sample_token(logits, std::vector<int32_t>{2}, {}, 0.5); }).find("context[0] = 2"),
            std::string::npos);
}

// A small untrained model: its logits are varied enough for sampling to differ between seeds.
LanguageModelConfig tiny_lm() {
  LanguageModelConfig c;
  c.vocab_size = 11;
  c.context = 8;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  return c;
}

// The generate loop as it was before SamplingOptions (full re-run, softmax in double, one walk of the
// cumulative mass): the old entry point must still produce exactly these tokens.
std::vector<int32_t> reference_generate(LanguageModel& lm, std::vector<int32_t> context, int n, float temperature,
                                        uint64_t seed) {
  const int V = lm.config().vocab_size, T_max = lm.config().context;
  Rng rng(seed);
  std::vector<int32_t> out;
  std::vector<double> p(static_cast<size_t>(V));
  for (int i = 0; i < n; ++i) {
    const int T = std::min<int>(static_cast<int>(context.size()), T_max);
    const std::vector<int32_t> window(context.end() - T, context.end());
    const auto logits = lm.logits(window, 1, T);
    const float* z = logits.data() + static_cast<size_t>(T - 1) * V;
    int32_t next = V - 1;
    if (temperature == 0.f) {
      next = static_cast<int32_t>(std::max_element(z, z + V) - z);
    } else {
      const double mx = *std::max_element(z, z + V);
      double sum = 0.0;
      for (int v = 0; v < V; ++v) sum += p[v] = std::exp((z[v] - mx) / temperature);
      double u = rng.uniform() * sum;
      for (int v = 0; v < V; ++v)
        if ((u -= p[v]) < 0.0) {
          next = v;
          break;
        }
    }
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

TEST(Sampling, TheOldGenerateGivesTheSameTokensAsBefore) {
  LanguageModel lm(tiny_lm());
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (float t : {0.f, 0.8f, 1.5f}) {
    EXPECT_EQ(lm.generate(prompt, 20, t, 9), reference_generate(lm, prompt, 20, t, 9)) << "temperature " << t;
    SamplingOptions o = with_temperature(t);
    o.max_new_tokens = 20;
    o.seed = 9;
    EXPECT_EQ(lm.generate(prompt, o), lm.generate(prompt, 20, t, 9)) << "temperature " << t;
  }
}

TEST(Sampling, TheSameSeedGivesTheSameTokens) {
  LanguageModel lm(tiny_lm());
  const std::vector<int32_t> prompt = {4};
  SamplingOptions o = with_temperature(1.2f);
  o.max_new_tokens = 40;
  o.top_k = 6;
  o.top_p = 0.95f;
  o.repetition_penalty = 1.3f;
  o.seed = 77;
  const auto a = lm.generate(prompt, o), b = lm.generate(prompt, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 40u);
  o.seed = 78;
  EXPECT_NE(lm.generate(prompt, o), a);
}

TEST(Sampling, StopTokensAndTheCallbackEndGeneration) {
  LanguageModel lm(tiny_lm());
  const std::vector<int32_t> prompt = {1, 5};
  SamplingOptions o = with_temperature(1.f);
  o.max_new_tokens = 30;
  o.seed = 3;
  const auto full = lm.generate(prompt, o);
  ASSERT_EQ(full.size(), 30u);
  // Stop on the 6th token's id: generation ends at its first occurrence, which is emitted.
  o.stop_tokens = {full[5]};
  const size_t first = static_cast<size_t>(std::find(full.begin(), full.end(), full[5]) - full.begin());
  std::vector<int32_t> streamed;
  const auto stopped = lm.generate(prompt, o, [&](int32_t t) {
    streamed.push_back(t);
    return true;
  });
  EXPECT_EQ(stopped, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  EXPECT_EQ(streamed, stopped);
  // The callback returning false stops after that token.
  o.stop_tokens.clear();
  int calls = 0;
  const auto cut = lm.generate(prompt, o, [&](int32_t) { return ++calls < 4; });
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(cut, std::vector<int32_t>(full.begin(), full.begin() + 4));
  // Stop tokens are checked against the vocabulary.
  o.stop_tokens = {11};
  EXPECT_NE(message_of([&] { lm.generate(prompt, o); }).find("stop_tokens[0] = 11 is out of range"), std::string::npos);
}

}  // namespace
}  // namespace qkv::sampling_test
