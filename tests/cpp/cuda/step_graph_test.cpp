// The training step launched as one CUDA graph (kernels/cuda/step_graph.h; ops.h: Backend::begin_step): for each
// model, steps with the graph (one eager step per shape, then a capture, then replays) give the bits of the same
// steps run op by op (QKV_CUDA_GRAPH=0's path) — losses, weights, Adam moments and step counts — while the values
// that change from step to step change (dropout seeds, a warmup's lr, the loss's 1/count with padding), shapes
// change and come back, and a step goes non-finite. Needs a GPU (skipped without one).
#include "kernels/cuda/step_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda_test_util.h"
#include "models/device_fixtures.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv {
namespace {

namespace kc = kernels::cuda;
using test::ids;

// Dropout on, clipping on, a warmup: every step has its own seeds and lr.
OptimizerConfig changing_optimizer(NonFinite policy = NonFinite::Error) {
  OptimizerConfig o;
  o.lr = 3e-3f;
  o.schedule = Schedule::Cosine;
  o.warmup_steps = 4;
  o.total_steps = 40;
  o.grad_clip = 0.5f;
  o.non_finite = policy;
  return o;
}

// Restores the process's graph switch when a test ends, whatever happened in it.
struct GraphSwitch {
  ~GraphSwitch() { kc::step_graph().set_enabled(true); }
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Runs `steps` (each returns its loss) on two twins, the first with the graph, the second op by op, and checks
// that every loss and the final checkpoints (weights, moments, step counts) are the same bits.
template <class Model>
void expect_twins_agree(Model& graphed, Model& eager, const std::vector<std::function<float(Model&)>>& steps,
                        long long min_replays) {
  GraphSwitch restore;
  const ops::StepRecorder::Counts before = kc::step_graph().counts();
  std::vector<float> got, want;
  kc::step_graph().set_enabled(true);
  for (const auto& step : steps) got.push_back(step(graphed));
  const ops::StepRecorder::Counts after = kc::step_graph().counts();
  kc::step_graph().set_enabled(false);
  for (const auto& step : steps) want.push_back(step(eager));
  EXPECT_GE(after.replayed - before.replayed, min_replays) << "the steps were not replayed as a graph";
  EXPECT_GE(after.captured - before.captured, 1);
  EXPECT_EQ(after.retried, before.retried) << "no step should have had to run again";
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(same_bits(got[i], want[i])) << "step " << i << ": graph " << got[i] << ", op by op " << want[i];
  EXPECT_EQ(graphed.step(), eager.step());
  EXPECT_EQ(graphed.skipped_steps(), eager.skipped_steps());
  EXPECT_TRUE(graphed.save(true) == eager.save(true)) << "weights or moments differ";
}

TEST(CudaStepGraph, LanguageModelStepsReplayedAreTheStepsRunOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  LanguageModelConfig c = test::lm_config();
  c.dropout = 0.1f;
  LanguageModel graphed(c, changing_optimizer(), Device::CUDA), eager(c, changing_optimizer(), Device::CUDA);
  std::vector<std::function<float(LanguageModel&)>> steps;
  for (int s = 0; s < 20; ++s) {
    // Shape (3, 11) six times, (2, 7) twice, (3, 11) four times, then the two alternating: each shape is captured
    // at its second step and keeps its graph (8 replays of the first, then 8 of both in turn).
    const bool other = s == 6 || s == 7 || (s >= 12 && s % 2 == 1);
    const int B = other ? 2 : 3, T = other ? 7 : 11;
    steps.push_back(
        [B, T, s](LanguageModel& m) { return m.train_step(ids(B, T, 17, 100 + s), ids(B, T, 17, 200 + s), B, T); });
  }
  expect_twins_agree(graphed, eager, steps, 16);
}

TEST(CudaStepGraph, Seq2SeqWithPaddingAndClassifierStepsReplayedAreTheStepsRunOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  {
    Seq2SeqConfig c = test::seq2seq_config();
    c.dropout = 0.1f;
    Seq2Seq graphed(c, changing_optimizer(), Device::CUDA), eager(c, changing_optimizer(), Device::CUDA);
    std::vector<std::function<float(Seq2Seq&)>> steps;
    const int B = 4, S = 9, T = 7;
    for (int s = 0; s < 8; ++s)  // padding that moves: the count behind the loss's 1/count changes per step
      steps.push_back([s](Seq2Seq& m) {
        return m.train_step(ids(B, S, 13, 300 + s, 1 + s % 3), ids(B, T, 15, 400 + s, s % 4),
                            ids(B, T, 15, 500 + s, s % 4), B, S, T);
      });
    expect_twins_agree(graphed, eager, steps, 6);
  }
  for (Pooling pooling : {Pooling::First, Pooling::Mean}) {
    ClassifierConfig c = test::classifier_config(pooling);
    c.dropout = 0.1f;
    Classifier graphed(c, changing_optimizer(), Device::CUDA), eager(c, changing_optimizer(), Device::CUDA);
    std::vector<std::function<float(Classifier&)>> steps;
    const int B = 5, T = 8;
    for (int s = 0; s < 8; ++s)
      steps.push_back([s](Classifier& m) {
        std::vector<int32_t> labels(B);
        for (int b = 0; b < B; ++b) labels[static_cast<size_t>(b)] = (b + s) % 3;
        return m.train_step(ids(B, T, 19, 600 + s, 2), labels, B, T);
      });
    expect_twins_agree(graphed, eager, steps, 6);
  }
}

// A step that goes non-finite inside a replayed graph answers as op by op: under Skip the same steps are skipped
// (the device's gate kept the update from happening), under Error the loss's message with nothing changed.
TEST(CudaStepGraph, NonFiniteStepsInsideTheGraphAnswerAsOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  LanguageModelConfig c = test::lm_config();
  LanguageModel graphed(c, changing_optimizer(NonFinite::Skip), Device::CUDA),
      eager(c, changing_optimizer(NonFinite::Skip), Device::CUDA);
  std::vector<std::function<float(LanguageModel&)>> steps;
  const int B = 3, T = 11;
  for (int s = 0; s < 10; ++s)
    steps.push_back([s](LanguageModel& m) {
      if (s == 5) m.set_learning_rate(1e30f);  // the weights blow up: the next losses are not finite
      return m.train_step(ids(B, T, 17, 700 + s), ids(B, T, 17, 800 + s), B, T);
    });
  expect_twins_agree(graphed, eager, steps, 2);
  EXPECT_GT(graphed.skipped_steps(), 0) << "the test meant some steps to be skipped";

  // Under Error: the step after the one that breaks the weights throws the loss's message, with t unchanged and
  // the same weights and moments as op by op (deferred_step_test.cpp checks them unchanged on the CPU).
  const auto strict_run = [&](LanguageModel& m) {
    for (int s = 0; s < 4; ++s) m.train_step(ids(B, T, 17, 900), ids(B, T, 17, 901), B, T);
    m.set_learning_rate(1e30f);
    m.train_step(ids(B, T, 17, 900), ids(B, T, 17, 901), B, T);  // the update that breaks the weights
    return test::message_of([&] { m.train_step(ids(B, T, 17, 900), ids(B, T, 17, 901), B, T); });
  };
  GraphSwitch restore;
  LanguageModel strict(c, changing_optimizer(NonFinite::Error), Device::CUDA),
      plain(c, changing_optimizer(NonFinite::Error), Device::CUDA);
  const long long replays = kc::step_graph().counts().replayed;
  const std::string message = strict_run(strict);
  EXPECT_GE(kc::step_graph().counts().replayed - replays, 4);
  kc::step_graph().set_enabled(false);
  EXPECT_EQ(strict_run(plain), message);
  EXPECT_NE(message.find("the loss is not finite"), std::string::npos) << message;
  EXPECT_EQ(strict.step(), 5);
  EXPECT_EQ(plain.step(), 5);
  EXPECT_TRUE(strict.save(true) == plain.save(true)) << "a refused step changed the weights or moments";
}

}  // namespace
}  // namespace qkv
