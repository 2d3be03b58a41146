// Learning-rate schedules, and gradient accumulation: equal to one big batch, and refused with nothing accumulated.
#include "qkv/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"

namespace qkv::optimizer_test {
namespace {

TEST(Schedule, ConstantWithWarmup) {
  OptimizerConfig o;
  o.lr = 0.5f;
  EXPECT_FLOAT_EQ(learning_rate_at(o, 1), 0.5f);
  o.warmup_steps = 10;
  EXPECT_FLOAT_EQ(learning_rate_at(o, 1), 0.05f);
  EXPECT_FLOAT_EQ(learning_rate_at(o, 5), 0.25f);
  EXPECT_FLOAT_EQ(learning_rate_at(o, 10), 0.5f);
  EXPECT_FLOAT_EQ(learning_rate_at(o, 1000), 0.5f);
}

// The paper's schedule: d^-0.5 * min(t^-0.5, t * w^-1.5), here scaled so that its peak (at t = w) is lr.
TEST(Schedule, InverseSquareRootIsThePapersShape) {
  OptimizerConfig o;
  o.lr = 1.f;
  o.schedule = Schedule::InverseSqrt;
  o.warmup_steps = 4000;
  const double d = 512, peak = std::pow(d, -0.5) * std::pow(4000.0, -0.5);
  for (int t : {1, 100, 3999, 4000, 4001, 10000, 100000}) {
    const double paper = std::pow(d, -0.5) * std::min(std::pow(t, -0.5), t * std::pow(4000.0, -1.5));
    EXPECT_NEAR(learning_rate_at(o, t), paper / peak, 1e-6) << "t=" << t;
  }
}

TEST(Schedule, CosineFromWarmupToMinLr) {
  OptimizerConfig o;
  o.lr = 1e-3f;
  o.min_lr = 1e-4f;
  o.schedule = Schedule::Cosine;
  o.warmup_steps = 100;
  o.total_steps = 2000;
  validate(o);
  EXPECT_FLOAT_EQ(learning_rate_at(o, 50), 5e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(o, 100), 1e-3f);
  EXPECT_NEAR(learning_rate_at(o, 1050), 5.5e-4f, 1e-9);  // halfway: the mean of lr and min_lr
  EXPECT_FLOAT_EQ(learning_rate_at(o, 2000), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(o, 5000), 1e-4f);
  o.total_steps = 50;
  EXPECT_THROW(validate(o), Error);
}

// Two half batches accumulated with weight 1/2 give the gradient of the whole batch's mean loss.
TEST(GradientAccumulation, EqualsOneBigBatch) {
  LanguageModelConfig c{.vocab_size = 9, .context = 8, .d_model = 16, .heads = 2, .layers = 2};
  LanguageModel whole(c), parts(c);
  std::vector<int32_t> in(32), tg(32);
  for (int i = 0; i < 32; ++i) {
    in[i] = (i * 7) % 9;
    tg[i] = (i * 4 + 1) % 9;
  }
  const float full = whole.forward_backward(in, tg, 4, 8);
  parts.zero_grad();
  const float a = parts.accumulate(std::span(in).first(16), std::span(tg).first(16), 2, 8, 0.5f);
  const float b = parts.accumulate(std::span(in).last(16), std::span(tg).last(16), 2, 8, 0.5f);
  EXPECT_NEAR((a + b) / 2, full, 1e-6);
  auto pw = whole.parameters(), pp = parts.parameters();
  for (size_t k = 0; k < pw.size(); ++k)
    for (size_t i = 0; i < pw[k].grad.size(); ++i)
      ASSERT_NEAR(pp[k].grad[i], pw[k].grad[i], 1e-6 + 1e-5 * std::abs(pw[k].grad[i])) << pw[k].name << "[" << i << "]";
  parts.apply_gradients();
  EXPECT_EQ(parts.step(), 1);
}

// apply_gradients() with nothing accumulated since zero_grad() (or since the model was made) is refused, the
// weights and step() unchanged; after an accumulate() it steps, and a step that NonFinite::Skip skipped (its
// gradients zeroed) must be accumulated again before the next.
TEST(GradientAccumulation, NothingAccumulatedIsRefused) {
  LanguageModelConfig c{.vocab_size = 9, .context = 8, .d_model = 16, .heads = 2, .layers = 1};
  OptimizerConfig o;
  o.non_finite = NonFinite::Skip;
  LanguageModel m(c, o);
  std::vector<int32_t> in(16), tg(16);
  for (int i = 0; i < 16; ++i) {
    in[i] = (i * 7) % 9;
    tg[i] = (i * 4 + 1) % 9;
  }
  const std::vector<float> before(m.parameters()[0].value.begin(), m.parameters()[0].value.end());
  const auto refused = [&](const char* when) {
    try {
      m.apply_gradients();
      ADD_FAILURE() << when << ": no throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no micro-batch was accumulated since zero_grad()"), std::string::npos)
          << when << ": " << e.what();
    }
  };
  refused("a new model");
  m.zero_grad();
  refused("after zero_grad");
  EXPECT_EQ(m.step(), 0);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), m.parameters()[0].value.begin()));
  m.accumulate(in, tg, 2, 8);
  EXPECT_TRUE(m.apply_gradients());
  EXPECT_EQ(m.step(), 1);
  // A skipped step (a non-finite gradient) zeroes the gradients: there is nothing left to step on.
  m.zero_grad();
  m.accumulate(in, tg, 2, 8);
  m.parameters()[0].grad[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(m.apply_gradients());
  refused("after a skipped step");
  EXPECT_EQ(m.step(), 1);
}

TEST(GradientAccumulation, ClassifierEqualsOneBigBatch) {
  ClassifierConfig c{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3};
  c.pooling = Pooling::Mean;
  Classifier whole(c), parts(c);
  const std::vector<int32_t> tok = {1, 2, 3, 0, 0, 4, 5, 6, 1, 0}, lab = {2, 0};
  whole.forward_backward(tok, lab, 2, 5);
  parts.zero_grad();
  parts.accumulate(std::span(tok).first(5), std::span(lab).first(1), 1, 5, 0.5f);
  parts.accumulate(std::span(tok).last(5), std::span(lab).last(1), 1, 5, 0.5f);
  auto pw = whole.parameters(), pp = parts.parameters();
  for (size_t k = 0; k < pw.size(); ++k)
    for (size_t i = 0; i < pw[k].grad.size(); ++i)
      ASSERT_NEAR(pp[k].grad[i], pw[k].grad[i], 1e-6 + 1e-5 * std::abs(pw[k].grad[i])) << pw[k].name << "[" << i << "]";
}

}  // namespace
}  // namespace qkv::optimizer_test
