#pragma once
// The training-step sequences that a step launched as one unit must run as op by op, bit for bit: shared by the
// CPU executor that defers steps (models/deferred_step_test.cpp, every machine) and the CUDA graph
// (cuda/step_graph_test.cpp, on a GPU). Each case says how many of its steps at least are replayed.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "models/device_fixtures.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::test {

// Dropout on, clipping on, a warmup: every step has its own seeds and lr.
inline OptimizerConfig changing_optimizer(NonFinite policy = NonFinite::Error) {
  OptimizerConfig o;
  o.lr = 3e-3f;
  o.schedule = Schedule::Cosine;
  o.warmup_steps = 4;
  o.total_steps = 40;
  o.grad_clip = 0.5f;
  o.non_finite = policy;
  return o;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

template <class Model>
struct StepCase {
  std::vector<std::function<float(Model&)>> steps;
  long long min_replays;
};

// Shape (3, 11) six times, (2, 7) twice, (3, 11) four times, then the two alternating: each shape is captured at
// its second step and keeps its graph (8 replays of the first, then 8 of both in turn).
inline StepCase<LanguageModel> lm_shape_steps() {
  StepCase<LanguageModel> c{{}, 16};
  for (int s = 0; s < 20; ++s) {
    const bool other = s == 6 || s == 7 || (s >= 12 && s % 2 == 1);
    const int B = other ? 2 : 3, T = other ? 7 : 11;
    c.steps.push_back(
        [B, T, s](LanguageModel& m) { return m.train_step(ids(B, T, 17, 100 + s), ids(B, T, 17, 200 + s), B, T); });
  }
  return c;
}

// Padding that moves: the count behind the loss's scale changes from step to step.
inline StepCase<Seq2Seq> seq2seq_padding_steps() {
  StepCase<Seq2Seq> c{{}, 6};
  const int B = 4, S = 9, T = 7;
  for (int s = 0; s < 8; ++s)
    c.steps.push_back([s](Seq2Seq& m) {
      return m.train_step(ids(B, S, 13, 300 + s, 1 + s % 3), ids(B, T, 15, 400 + s, s % 4),
                          ids(B, T, 15, 500 + s, s % 4), B, S, T);
    });
  return c;
}

inline StepCase<Classifier> classifier_steps() {
  StepCase<Classifier> c{{}, 6};
  for (int s = 0; s < 8; ++s)
    c.steps.push_back([s](Classifier& m) {
      std::vector<int32_t> labels(5);
      for (int b = 0; b < 5; ++b) labels[static_cast<size_t>(b)] = (b + s) % 3;
      return m.train_step(ids(5, 8, 19, 600 + s, 2), labels, 5, 8);
    });
  return c;
}

// Under NonFinite::Skip: at step 5 the lr becomes 1e30, the weights blow up and the later losses are not finite.
inline StepCase<LanguageModel> lm_nonfinite_steps() {
  StepCase<LanguageModel> c{{}, 2};
  const int B = 3, T = 11;
  for (int s = 0; s < 10; ++s)
    c.steps.push_back([s](LanguageModel& m) {
      if (s == 5) m.set_learning_rate(1e30f);
      return m.train_step(ids(B, T, 17, 700 + s), ids(B, T, 17, 800 + s), B, T);
    });
  return c;
}

// Under NonFinite::Error: four steps (replayed from the third), one with lr 1e30 that breaks the weights, then
// `before` (run between them, e.g. to copy the weights) and the message of the next step, which must throw.
inline std::string lm_strict_run(
    LanguageModel& m, const std::function<void()>& before = [] {}) {
  const int B = 3, T = 11;
  for (int s = 0; s < 4; ++s) m.train_step(ids(B, T, 17, 900), ids(B, T, 17, 901), B, T);
  m.set_learning_rate(1e30f);
  m.train_step(ids(B, T, 17, 900), ids(B, T, 17, 901), B, T);
  before();
  return message_of([&] { m.train_step(ids(B, T, 17, 900), ids(B, T, 17, 901), B, T); });
}

inline LanguageModelConfig lm_config_with_dropout() {
  LanguageModelConfig c = lm_config();
  c.dropout = 0.1f;
  return c;
}
inline Seq2SeqConfig seq2seq_config_with_dropout() {
  Seq2SeqConfig c = seq2seq_config();
  c.dropout = 0.1f;
  return c;
}
inline ClassifierConfig classifier_config_with_dropout(Pooling pooling) {
  ClassifierConfig c = classifier_config(pooling);
  c.dropout = 0.1f;
  return c;
}

}  // namespace qkv::test
