// Numerical faults in the optimizer: a NaN or infinite gradient (with a finite loss, which the models'
// own check cannot see) stops the step with a qkv::Error, and the weights, the Adam moments and the step
// count are exactly as before. The non-finite loss itself is tested per model (language_model_test,
// bad_input_test).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "nn/parameters.h"
#include "qkv/error.h"
#include "test_util.h"
#include "train/optimizer.h"

namespace qkv {
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

}  // namespace
}  // namespace qkv
