#pragma once
// The training-step sequences that a step launched as one unit must run as op by op, bit for bit: shared by the
// CPU executor that defers steps (models/deferred_step_test.cpp, every machine) and the CUDA graph
// (cuda/step_graph_test.cpp, on a GPU). Each case says how many of its steps at least are replayed.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "models/device_fixtures.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "qkv/step_loss.h"
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

// A step's loss, read when called: at once for train_step, later for a step queued with queue_train_step (which
// is then settled by the call, or by whatever settled it before).
using Loss = std::function<float()>;

// One training step on m, with train_step or (queued) queue_train_step.
template <class Model, class... A>
Loss train(Model& m, bool queued, A... args) {  // by value: the callers pass constants uncaptured
  if (queued) {
    const StepLoss l = m.queue_train_step(args...);
    return [l] { return l.get(); };
  }
  const float loss = m.train_step(args...);
  return [loss] { return loss; };
}

template <class Model>
struct StepCase {
  std::vector<std::function<Loss(Model&, bool queued)>> steps;
  long long min_replays;
};

// Runs a case's steps on m and returns their losses: with train_step (lag < 0), or queued, each loss read `lag`
// steps after its step was queued (the steps in between are in flight), the last ones at the end.
template <class Model>
std::vector<float> run_steps(Model& m, const StepCase<Model>& c, int lag = -1) {
  std::vector<Loss> pending;
  std::vector<float> losses;
  size_t read = 0;
  for (const auto& step : c.steps) {
    pending.push_back(step(m, lag >= 0));
    while (pending.size() - read > static_cast<size_t>(std::max(lag, 0))) losses.push_back(pending[read++]());
  }
  while (read < pending.size()) losses.push_back(pending[read++]());
  return losses;
}

// Shape (3, 11) six times, (2, 7) twice, (3, 11) four times, then the two alternating: each shape is captured at
// its second step and keeps its graph (8 replays of the first, then 8 of both in turn).
inline StepCase<LanguageModel> lm_shape_steps() {
  StepCase<LanguageModel> c{{}, 16};
  for (int s = 0; s < 20; ++s) {
    const bool other = s == 6 || s == 7 || (s >= 12 && s % 2 == 1);
    const int B = other ? 2 : 3, T = other ? 7 : 11;
    c.steps.push_back([B, T, s](LanguageModel& m, bool queued) {
      return train(m, queued, ids(B, T, 17, 100 + s), ids(B, T, 17, 200 + s), B, T);
    });
  }
  return c;
}

// Padding that moves: the count behind the loss's scale changes from step to step.
inline StepCase<Seq2Seq> seq2seq_padding_steps() {
  StepCase<Seq2Seq> c{{}, 6};
  const int B = 4, S = 9, T = 7;
  for (int s = 0; s < 8; ++s)
    c.steps.push_back([s](Seq2Seq& m, bool queued) {
      return train(m, queued, ids(B, S, 13, 300 + s, 1 + s % 3), ids(B, T, 15, 400 + s, s % 4),
                   ids(B, T, 15, 500 + s, s % 4), B, S, T);
    });
  return c;
}

inline StepCase<Classifier> classifier_steps() {
  StepCase<Classifier> c{{}, 6};
  for (int s = 0; s < 8; ++s)
    c.steps.push_back([s](Classifier& m, bool queued) {
      std::vector<int32_t> labels(5);
      for (int b = 0; b < 5; ++b) labels[static_cast<size_t>(b)] = (b + s) % 3;
      return train(m, queued, ids(5, 8, 19, 600 + s, 2), labels, 5, 8);
    });
  return c;
}

// Under NonFinite::Skip: at step 5 the lr becomes 1e30, the weights blow up and the later losses are not finite.
inline StepCase<LanguageModel> lm_nonfinite_steps() {
  StepCase<LanguageModel> c{{}, 2};
  const int B = 3, T = 11;
  for (int s = 0; s < 10; ++s)
    c.steps.push_back([s](LanguageModel& m, bool queued) {
      if (s == 5) m.set_learning_rate(1e30f);
      return train(m, queued, ids(B, T, 17, 700 + s), ids(B, T, 17, 800 + s), B, T);
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

// Under NonFinite::Error, with steps queued (queued) or taken with train_step: four steps, a checkpoint, one with
// lr 1e30 that breaks the weights, then the step that must throw the loss's message; queued, one more step is
// queued behind it before its loss is read, and must not run (dropped: its loss's message). Then the checkpoint is
// loaded back and three more steps run (on the GPU: the device, halted by the refusal, must run them).
struct StrictRun {
  std::vector<float> losses;
  std::string refused, dropped;
  int step_after_error = 0;
  std::vector<uint8_t> after_error, end;
};
inline StrictRun lm_strict_pipeline(LanguageModel& m, bool queued) {
  const int B = 3, T = 11;
  const auto step = [&](int s) { return train(m, queued, ids(B, T, 17, 1000 + s), ids(B, T, 17, 1100 + s), B, T); };
  StrictRun r;
  std::vector<Loss> losses;
  for (int s = 0; s < 4; ++s) losses.push_back(step(s));
  const std::vector<uint8_t> before = m.save(true);
  m.set_learning_rate(1e30f);
  losses.push_back(step(4));
  Loss dropped;
  r.refused = message_of([&] {
    const Loss refused = step(5);  // train_step throws here
    if (queued) dropped = step(6);
    refused();  // queued: settles the steps up to it
  });
  if (dropped) r.dropped = message_of([&] { dropped(); });
  r.step_after_error = m.step();
  r.after_error = m.save(true);
  m.load_state(before);
  m.set_learning_rate(2e-3f);
  for (int s = 7; s < 10; ++s) losses.push_back(step(s));
  for (const Loss& l : losses) r.losses.push_back(l());
  r.end = m.save(true);
  return r;
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
