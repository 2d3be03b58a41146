// The training step launched as one CUDA graph (exec/cuda/step_graph.h; ops.h: Backend::begin_step): for each
// model, steps with the graph (one eager step per shape, then a capture, then replays) give the bits of the same
// steps run op by op (QKV_CUDA_GRAPH=0's path) — losses, weights, Adam moments and step counts — while the values
// that change from step to step change (dropout seeds, a warmup's lr, the loss's 1/count with padding), shapes
// change and come back, and a step goes non-finite. Needs a GPU (skipped without one).
#include "exec/cuda/step_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "models/device_fixtures.h"
#include "models/step_cases.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::step_graph_test {
namespace {

namespace kc = kernels::cuda;
using test::ids;

// Restores the process's graph switch when a test ends, whatever happened in it (QKV_CUDA_GRAPH=0 runs leave it off).
struct GraphSwitch {
  const bool was = kc::step_graph().enabled();
  ~GraphSwitch() { kc::step_graph().set_enabled(was); }
};

// Runs `steps` (each returns its loss) on two twins, the first with the graph, the second op by op, and checks
// that every loss and the final checkpoints (weights, moments, step counts) are the same bits. lag >= 0: the
// graphed twin's steps are queued (queue_train_step), each loss read `lag` steps later (test::run_steps).
template <class Model>
void expect_twins_agree(Model& graphed, Model& eager, const test::StepCase<Model>& c, int lag = -1) {
  GraphSwitch restore;
  const ops::StepRecorder::Counts before = kc::step_graph().counts();
  std::vector<float> got, want;
  kc::step_graph().set_enabled(true);
  got = test::run_steps(graphed, c, lag);
  const ops::StepRecorder::Counts after = kc::step_graph().counts();
  kc::step_graph().set_enabled(false);
  want = test::run_steps(eager, c);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GE(after.replayed - before.replayed, c.min_replays) << "the steps were not replayed as a graph";
  EXPECT_GE(after.captured - before.captured, 1);
  EXPECT_EQ(after.retried, before.retried) << "no step should have had to run again";
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(test::same_bits(got[i], want[i])) << "step " << i << ": graph " << got[i] << ", op by op " << want[i];
  EXPECT_EQ(graphed.step(), eager.step());
  EXPECT_EQ(graphed.skipped_steps(), eager.skipped_steps());
  EXPECT_TRUE(graphed.save(true) == eager.save(true)) << "weights or moments differ";
}

TEST(CudaStepGraph, LanguageModelStepsReplayedAreTheStepsRunOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  const LanguageModelConfig c = test::lm_config_with_dropout();
  LanguageModel graphed(c, test::changing_optimizer(), Device::CUDA),
      eager(c, test::changing_optimizer(), Device::CUDA);
  expect_twins_agree(graphed, eager, test::lm_shape_steps());
}

TEST(CudaStepGraph, Seq2SeqWithPaddingAndClassifierStepsReplayedAreTheStepsRunOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  {
    const Seq2SeqConfig c = test::seq2seq_config_with_dropout();
    Seq2Seq graphed(c, test::changing_optimizer(), Device::CUDA), eager(c, test::changing_optimizer(), Device::CUDA);
    expect_twins_agree(graphed, eager, test::seq2seq_padding_steps());
  }
  for (Pooling pooling : {Pooling::First, Pooling::Mean}) {
    const ClassifierConfig c = test::classifier_config_with_dropout(pooling);
    Classifier graphed(c, test::changing_optimizer(), Device::CUDA), eager(c, test::changing_optimizer(), Device::CUDA);
    expect_twins_agree(graphed, eager, test::classifier_steps());
  }
}

// A step that goes non-finite inside a replayed graph answers as op by op: under Skip the same steps are skipped
// (the device's gate kept the update from happening), under Error the loss's message with t unchanged and the
// same weights and moments as op by op (deferred_step_test.cpp checks them unchanged on the CPU).
TEST(CudaStepGraph, NonFiniteStepsInsideTheGraphAnswerAsOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  const LanguageModelConfig c = test::lm_config();
  {
    LanguageModel graphed(c, test::changing_optimizer(NonFinite::Skip), Device::CUDA),
        eager(c, test::changing_optimizer(NonFinite::Skip), Device::CUDA);
    expect_twins_agree(graphed, eager, test::lm_nonfinite_steps());
    EXPECT_GT(graphed.skipped_steps(), 0) << "the case meant some steps to be skipped";
  }
  GraphSwitch restore;
  kc::step_graph().set_enabled(true);
  LanguageModel strict(c, test::changing_optimizer(NonFinite::Error), Device::CUDA),
      plain(c, test::changing_optimizer(NonFinite::Error), Device::CUDA);
  const long long replays = kc::step_graph().counts().replayed;
  const std::string message = test::lm_strict_run(strict);
  EXPECT_GE(kc::step_graph().counts().replayed - replays, 3);
  kc::step_graph().set_enabled(false);
  EXPECT_EQ(test::lm_strict_run(plain), message);
  EXPECT_NE(message.find("the loss is not finite"), std::string::npos) << message;
  EXPECT_EQ(strict.step(), 5);
  EXPECT_EQ(plain.step(), 5);
  EXPECT_TRUE(strict.save(true) == plain.save(true)) << "a refused step changed the weights or moments";
}

// Steps queued without waiting (queue_train_step), each loss read one or two steps late, through the graph: the
// device picks each step's t (ops/adam_plan.h), the ids go up behind the step in flight (host_copies.h), and the
// bits are those of train_step's steps op by op; a refusal under NonFinite::Error in flight stops the step behind
// it, and the device runs again after the error (deferred_step_test.cpp runs the same on the CPU).
TEST(CudaStepGraph, QueuedStepsReadLaterAreTheStepsRunOpByOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  const LanguageModelConfig c = test::lm_config_with_dropout();
  for (int lag : {1, 2}) {
    SCOPED_TRACE("lag " + std::to_string(lag));
    LanguageModel graphed(c, test::changing_optimizer(), Device::CUDA),
        eager(c, test::changing_optimizer(), Device::CUDA);
    expect_twins_agree(graphed, eager, test::lm_shape_steps(), lag);
  }
  {
    LanguageModel graphed(c, test::changing_optimizer(NonFinite::Skip), Device::CUDA),
        eager(c, test::changing_optimizer(NonFinite::Skip), Device::CUDA);
    expect_twins_agree(graphed, eager, test::lm_nonfinite_steps(), 2);
    EXPECT_GT(graphed.skipped_steps(), 0);
  }
  GraphSwitch restore;
  kc::step_graph().set_enabled(true);
  LanguageModel queued(c, test::changing_optimizer(NonFinite::Error), Device::CUDA),
      plain(c, test::changing_optimizer(NonFinite::Error), Device::CUDA);
  const test::StrictRun got = test::lm_strict_pipeline(queued, true);
  kc::step_graph().set_enabled(false);
  const test::StrictRun want = test::lm_strict_pipeline(plain, false);
  EXPECT_NE(want.refused.find("the loss is not finite"), std::string::npos) << want.refused;
  EXPECT_EQ(got.refused, want.refused);
  EXPECT_NE(got.dropped.find("this training step did not run"), std::string::npos) << got.dropped;
  EXPECT_EQ(got.step_after_error, 5);
  EXPECT_TRUE(got.after_error == want.after_error);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) EXPECT_TRUE(test::same_bits(got.losses[i], want.losses[i])) << i;
  EXPECT_TRUE(got.end == want.end);
}

}  // namespace
}  // namespace qkv::step_graph_test
