// Numerical faults in the optimizer: a NaN or infinite gradient (with a finite loss, which the models'
// own check cannot see) stops the step with a qkv::Error, and the weights, the Adam moments and the step
// count are exactly as before. Under NonFinite::Skip the same step is skipped and counted instead. The
// non-finite loss itself is tested per model (language_model_test, bad_input_test, nonfinite_skip_test).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "nn/parameters.h"
#include "qkv/error.h"
#include "test_util.h"
#include "train/optimizer.h"

namespace qkv::nonfinite_test {
namespace {

TEST(NonFinite, AGradientNaNOrInfStopsTheStepAndChangesNothing) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    nn::Parameters params;
    params.add("w", {4, 8}, nn::Init::Normal, 0.02f);
    params.add("b", {8}, nn::Init::Zeros);
    params.finalize(7);
    train::Optimizer opt(OptimizerConfig{});
    // One good step first, so the moments are non-zero and a change to them would show.
    for (float& g : params.grads()) g = 0.5f;
    ASSERT_NO_THROW(opt.step(params));
    const std::vector<float> w(params.values().begin(), params.values().end());
    const std::vector<float> m(params.moments1().begin(), params.moments1().end());
    const std::vector<float> v(params.moments2().begin(), params.moments2().end());

    for (float& g : params.grads()) g = 0.25f;
    params.grads()[5] = bad;  // one poisoned gradient
    const std::string message = test::message_of([&] { opt.step(params); });
    EXPECT_NE(message.find("the gradient norm"), std::string::npos) << message;
    EXPECT_NE(message.find("is not finite; the step was skipped and the weights are unchanged"), std::string::npos)
        << message;
    EXPECT_EQ(std::vector<float>(params.values().begin(), params.values().end()), w);
    EXPECT_EQ(std::vector<float>(params.moments1().begin(), params.moments1().end()), m);
    EXPECT_EQ(std::vector<float>(params.moments2().begin(), params.moments2().end()), v);
    EXPECT_EQ(opt.steps(), 1);

    // The optimizer is still usable: finite gradients step again.
    params.grads()[5] = 0.25f;
    EXPECT_NO_THROW(opt.step(params));
    EXPECT_EQ(opt.steps(), 2);
    EXPECT_NE(std::vector<float>(params.values().begin(), params.values().end()), w);
  }
}

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// The layout of the test above; two built alike have the same initial weights.
void build(nn::Parameters& params) {
  params.add("w", {4, 8}, nn::Init::Normal, 0.02f);
  params.add("b", {8}, nn::Init::Zeros);
  params.finalize(7);
}

TEST(NonFinite, UnderSkipAGradientNaNOrInfIsSkippedCountedAndTheNextStepIsATwinsStep) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    OptimizerConfig config;
    config.non_finite = NonFinite::Skip;
    config.warmup_steps = 10;  // the lr depends on t: a skip that advanced t would change the next update
    nn::Parameters params, twin_params;
    build(params);
    build(twin_params);
    train::Optimizer opt(config), twin(config);
    for (float& g : params.grads()) g = 0.5f;
    for (float& g : twin_params.grads()) g = 0.5f;
    ASSERT_TRUE(opt.step(params));
    ASSERT_TRUE(twin.step(twin_params));
    ASSERT_EQ(copy(params.values()), copy(twin_params.values()));
    const std::vector<float> w = copy(params.values()), m = copy(params.moments1()), v = copy(params.moments2());

    for (float& g : params.grads()) g = 0.25f;
    params.grads()[5] = bad;
    EXPECT_FALSE(opt.step(params));  // no throw
    EXPECT_TRUE(opt.last_skipped());
    EXPECT_EQ(opt.skipped(), 1);
    EXPECT_EQ(opt.steps(), 1);
    EXPECT_EQ(copy(params.values()), w);
    EXPECT_EQ(copy(params.moments1()), m);
    EXPECT_EQ(copy(params.moments2()), v);
    for (float g : params.grads()) ASSERT_EQ(g, 0.f);  // cleared for the next step

    // A non-finite loss reported by the model (its backward never ran) skips as well, gradients or not.
    for (float& g : params.grads()) g = 0.25f;
    EXPECT_FALSE(opt.step(params, /*finite_loss=*/false));
    EXPECT_EQ(opt.skipped(), 2);
    EXPECT_EQ(opt.steps(), 1);
    EXPECT_EQ(copy(params.values()), w);
    EXPECT_EQ(copy(params.moments1()), m);
    for (float g : params.grads()) ASSERT_EQ(g, 0.f);

    // The next good step is exactly the step of the twin that never saw the bad gradients.
    for (float& g : params.grads()) g = 0.125f;
    for (float& g : twin_params.grads()) g = 0.125f;
    EXPECT_TRUE(opt.step(params));
    EXPECT_FALSE(opt.last_skipped());
    EXPECT_TRUE(twin.step(twin_params));
    EXPECT_EQ(opt.steps(), 2);
    EXPECT_EQ(opt.skipped(), 2);
    EXPECT_EQ(twin.skipped(), 0);
    EXPECT_EQ(copy(params.values()), copy(twin_params.values()));
    EXPECT_EQ(copy(params.moments1()), copy(twin_params.moments1()));
    EXPECT_EQ(copy(params.moments2()), copy(twin_params.moments2()));
  }
}

TEST(NonFinite, UnderErrorNothingIsCounted) {
  nn::Parameters params;
  build(params);
  train::Optimizer opt(OptimizerConfig{});
  for (float& g : params.grads()) g = INFINITY;
  EXPECT_NE(test::message_of([&] { opt.step(params); }).find("is not finite"), std::string::npos);
  EXPECT_EQ(opt.skipped(), 0);
  EXPECT_FALSE(opt.last_skipped());
  EXPECT_EQ(params.grads()[0], INFINITY);  // as before: the gradients are left for the caller to inspect
}

}  // namespace
}  // namespace qkv::nonfinite_test
