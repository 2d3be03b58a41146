// The CUDA optimizer kernels (kernels/cuda/adamw.cuh) on the warp emulator: the Adam(W) update against the CPU
// kernel, and the clipped step as adamw.cu launches it (sum of squares in a fixed grid, the decision in one
// thread, the update reading it): the sum against a plain double sum, the factor equal to ops/clip.h's of that
// sum, the update equal to the CPU's with that factor, and no write at all when the sum or the gate's (a step's
// losses) is not finite; the scalars read from device memory (a captured step's) in place of the launch's.
// Tolerance: p, m, v within 1e-5 * max(1, |cpu|) (the CPU kernel's SIMD and the GPU's may contract differently).
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/adamw.cuh"
#include "kernels/kernels.h"
#include "ops/clip.h"
#include "test_util.h"

namespace qkv::adamw_emulation_test {
namespace {

namespace kc = kernels::cuda;
using test::near;
using test::randn;

constexpr size_t kN = 5000;
const std::vector<kernels::AdamRange> kRanges{{0, 1, 0.1f}, {3, 2000, 0.f}, {2000, 4097, 0.1f}, {4200, kN, 0.01f}};

emu::Dim3 grid(unsigned blocks) { return {blocks, 1, 1}; }

struct State {
  std::vector<float> p = randn(kN, 1), m = randn(kN, 2, 0.1f), v = randn(kN, 3, 0.1f);
  State() {
    for (float& x : v) x = std::abs(x);
  }
};

void expect_same(const State& got, const State& want) {
  EXPECT_EQ(got.p, want.p);
  EXPECT_EQ(got.m, want.m);
  EXPECT_EQ(got.v, want.v);
}

// The clipped step as adamw.cu queues it; returns the decision. gate: empty for none. choice_dev: the choice a
// captured step reads from its block (the launch's own is then poisoned, to show it is not read). plan: the steps
// ahead and the counters (default: h alone); state: the device's AdamState across steps (default: a fresh one).
kc::ClipDecision clipped_step(State& s, const std::vector<float>& g, const kernels::AdamHyper& h, float max_norm,
                              const std::vector<float>& gate = {}, const kc::AdamChoice* choice_dev = nullptr,
                              const ops::AdamPlan* plan = nullptr, ops::AdamState* state = nullptr) {
  auto partial_sums = [](const std::vector<float>& x) {
    std::vector<double> partial(kc::kSumBlocks, std::nan(""));
    const size_t chunk = (x.size() + kc::kSumBlocks - 1) / kc::kSumBlocks;
    emu::launch(grid(kc::kSumBlocks), kc::kAdamThreads, 0,
                [&] { kc::sum_squares_kernel(partial.data(), x.data(), x.size(), chunk); });
    return partial;
  };
  const std::vector<double> partial = partial_sums(g), gate_partial = gate.empty() ? partial : partial_sums(gate);
  kc::ClipDecision decision{std::nan(""), std::nan(""), {}, -1};
  ops::AdamState fresh{0, 0};
  kc::AdamChoice launch_choice = kc::adam_choice(plan ? *plan : ops::AdamPlan::of(h));
  if (choice_dev)
    for (kc::AdamScalars& a : launch_choice.scalars) a.lr = a.step = a.beta1 = std::nanf("");
  emu::launch(grid(1), 1, 0, [&] {
    kc::clip_decision_kernel(&decision, state ? state : &fresh, partial.data(),
                             gate.empty() ? nullptr : gate_partial.data(), kc::kSumBlocks, max_norm, launch_choice,
                             choice_dev);
  });
  emu::launch(grid(static_cast<unsigned>(kc::grid_for(kN, kc::kAdamThreads))), kc::kAdamThreads, 0, [&] {
    kc::adam_kernel(s.p.data(), s.m.data(), s.v.data(), g.data(), kRanges.data(), static_cast<int>(kRanges.size()), kN,
                    launch_choice.scalars[0], &decision);
  });
  return decision;
}

TEST(AdamEmulated, UpdateMatchesTheCpu) {
  QKV_SKIP_UNDER_ASAN();
  for (bool decoupled : {true, false}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    State gpu, cpu;
    for (int t = 1; t <= 3; ++t) {
      const auto g = randn(kN, 10 + t);
      const kernels::AdamHyper h{1e-3f * t, 0.9f, 0.98f, 1e-9f, decoupled, t, t == 2 ? 0.5f : 1.f};
      kernels::adam_step(cpu.p, cpu.m, cpu.v, g, kRanges, h);
      // Fewer blocks than elements: the grid-stride loop covers the rest.
      emu::launch(grid(3), kc::kAdamThreads, 0, [&] {
        kc::adam_kernel(gpu.p.data(), gpu.m.data(), gpu.v.data(), g.data(), kRanges.data(),
                        static_cast<int>(kRanges.size()), kN, kc::adam_scalars(h), nullptr);
      });
    }
    EXPECT_TRUE(near("p", gpu.p, cpu.p, 1e-5, true));
    EXPECT_TRUE(near("m", gpu.m, cpu.m, 1e-5, true));
    EXPECT_TRUE(near("v", gpu.v, cpu.v, 1e-5, true));
  }
}

TEST(AdamEmulated, TheClippedStepDecidesOnTheDevice) {
  QKV_SKIP_UNDER_ASAN();
  const auto g = randn(kN, 20, 2.f);
  double want = 0;
  for (float x : g) want += static_cast<double>(x) * x;
  for (float max_norm : {0.f, 1.f, 1e6f}) {
    SCOPED_TRACE(::testing::Message() << "max_norm " << max_norm);
    State gpu, cpu;
    const kernels::AdamHyper h{1e-3f, 0.9f, 0.99f, 1e-8f, true, 1, 1.f};
    const kc::ClipDecision d = clipped_step(gpu, g, h, max_norm);
    EXPECT_NEAR(d.sum_squares, want, 1e-12 * want);
    EXPECT_EQ(d.gate_sum, 0.0);
    EXPECT_EQ(d.update, 1);
    EXPECT_EQ(d.scalars.grad_scale, ops::clip_factor(d.sum_squares, max_norm));
    if (max_norm == 1.f) {
      EXPECT_LT(d.scalars.grad_scale, 0.1f);  // sqrt(want) is about 140: clipped
    } else {
      EXPECT_EQ(d.scalars.grad_scale, 1.f);
    }
    kernels::AdamHyper clipped = h;
    clipped.grad_scale = d.scalars.grad_scale;
    kernels::adam_step(cpu.p, cpu.m, cpu.v, g, kRanges, clipped);
    EXPECT_TRUE(near("p", gpu.p, cpu.p, 1e-5, true));
    EXPECT_TRUE(near("m", gpu.m, cpu.m, 1e-5, true));
    EXPECT_TRUE(near("v", gpu.v, cpu.v, 1e-5, true));
  }
}

TEST(AdamEmulated, ANonFiniteSumLeavesEverythingUntouched) {
  QKV_SKIP_UNDER_ASAN();
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    auto g = randn(kN, 30);
    g[kN / 2] = bad;
    State s;
    const State before = s;
    const kernels::AdamHyper h{1e-3f, 0.9f, 0.99f, 1e-8f, true, 1, 1.f};
    const kc::ClipDecision d = clipped_step(s, g, h, 1.f);
    EXPECT_FALSE(std::isfinite(d.sum_squares));
    EXPECT_EQ(d.update, 0);
    expect_same(s, before);
  }
}

// A step's losses gate the update: one non-finite loss, and nothing is written, whatever the gradients.
TEST(AdamEmulated, ANonFiniteGateLeavesEverythingUntouched) {
  QKV_SKIP_UNDER_ASAN();
  const auto g = randn(kN, 40);
  auto losses = randn(300, 41);
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    losses[123] = bad;
    State s;
    const State before = s;
    const kernels::AdamHyper h{1e-3f, 0.9f, 0.99f, 1e-8f, true, 1, 1.f};
    const kc::ClipDecision d = clipped_step(s, g, h, 1.f, losses);
    EXPECT_TRUE(std::isfinite(d.sum_squares));
    EXPECT_FALSE(std::isfinite(d.gate_sum));
    EXPECT_EQ(d.update, 0);
    expect_same(s, before);
  }
  // Finite losses: the gate's sum of squares, and the update as without a gate.
  losses[123] = 0.5f;
  double want = 0;
  for (float x : losses) want += static_cast<double>(x) * x;
  State gated, plain;
  const kernels::AdamHyper h{1e-3f, 0.9f, 0.99f, 1e-8f, false, 3, 1.f};
  const kc::ClipDecision d = clipped_step(gated, g, h, 1.f, losses);
  clipped_step(plain, g, h, 1.f);
  EXPECT_NEAR(d.gate_sum, want, 1e-12 * want);
  EXPECT_EQ(d.update, 1);
  expect_same(gated, plain);
}

// A captured step's lr and bias corrections come from its scalar block: the update reads those, not the
// launch's (poisoned here), and equals the CPU's.
TEST(AdamEmulated, TheScalarsOfACapturedStepComeFromDeviceMemory) {
  QKV_SKIP_UNDER_ASAN();
  const auto g = randn(kN, 50);
  State gpu, cpu;
  const kernels::AdamHyper h{2e-3f, 0.9f, 0.95f, 1e-8f, true, 7, 1.f};
  const kc::AdamChoice block = kc::adam_choice(ops::AdamPlan::of(h));
  const kc::ClipDecision d = clipped_step(gpu, g, h, 1e6f, {}, &block);
  EXPECT_EQ(d.update, 1);
  EXPECT_EQ(d.scalars.lr, h.lr);
  kernels::adam_step(cpu.p, cpu.m, cpu.v, g, kRanges, h);
  EXPECT_TRUE(near("p", gpu.p, cpu.p, 1e-5, true));
  EXPECT_TRUE(near("m", gpu.m, cpu.m, 1e-5, true));
  EXPECT_TRUE(near("v", gpu.v, cpu.v, 1e-5, true));
}

// Steps queued ahead (ops/adam_plan.h): the decision kernel picks each step's scalars from the device's count of
// steps taken, skips without counting, and under a halting plan stops the steps behind a refusal until the epoch
// changes. Each update equals the CPU's with the hyper-parameters of the step number it got.
TEST(AdamEmulated, StepsQueuedAheadPickTheirStepNumberOnTheDevice) {
  QKV_SKIP_UNDER_ASAN();
  const auto g = randn(kN, 60);
  std::vector<float> bad_gate(3, 1.f);
  bad_gate[1] = std::numeric_limits<float>::infinity();
  const auto hyper = [](int t) { return kernels::AdamHyper{1e-3f * t, 0.9f, 0.98f, 1e-8f, true, t, 1.f}; };
  // Host: t0 = 4 known, base 10; three steps queued behind each other (ahead 0, 1, 2), the middle one refused.
  ops::AdamState state{10, 0};
  State gpu, cpu;
  const auto plan = [&](int ahead, int epoch, int halt) {
    ops::AdamPlan p{};
    for (int j = 0; j <= ahead; ++j) p.hyper[j] = hyper(5 + j);
    p.ahead = ahead;
    p.base = 10;
    p.epoch = epoch;
    p.halt = halt;
    return p;
  };
  ops::AdamPlan p0 = plan(0, 0, 0), p1 = plan(1, 0, 0), p2 = plan(2, 0, 0);
  EXPECT_EQ(clipped_step(gpu, g, hyper(1), 1e6f, {}, nullptr, &p0, &state).update, 1);  // t = 5
  kernels::adam_step(cpu.p, cpu.m, cpu.v, g, kRanges, hyper(5));
  EXPECT_EQ(clipped_step(gpu, g, hyper(1), 1e6f, bad_gate, nullptr, &p1, &state).update, 0);  // skipped
  const kc::ClipDecision d = clipped_step(gpu, g, hyper(1), 1e6f, {}, nullptr, &p2, &state);  // t = 6, not 7
  kernels::adam_step(cpu.p, cpu.m, cpu.v, g, kRanges, hyper(6));
  EXPECT_EQ(d.update, 1);
  EXPECT_EQ(d.scalars.lr, hyper(6).lr);
  EXPECT_EQ(state.taken, 12);
  EXPECT_TRUE(near("p", gpu.p, cpu.p, 1e-5, true));
  EXPECT_TRUE(near("m", gpu.m, cpu.m, 1e-5, true));

  // Halting (NonFinite::Error): a refusal stops the finite steps behind it in its epoch; the next epoch runs.
  ops::AdamState halting{0, 0};
  ops::AdamPlan h0 = plan(0, 3, 1), h1 = plan(1, 3, 1), next = plan(0, 4, 1);
  h0.base = h1.base = next.base = 0;
  State s;
  const State before = s;
  EXPECT_EQ(clipped_step(s, g, hyper(1), 1e6f, bad_gate, nullptr, &h0, &halting).update, 0);
  EXPECT_EQ(halting.halted, 4);
  EXPECT_EQ(clipped_step(s, g, hyper(1), 1e6f, {}, nullptr, &h1, &halting).update, 0);
  expect_same(s, before);
  EXPECT_EQ(halting.taken, 0);
  EXPECT_EQ(clipped_step(s, g, hyper(1), 1e6f, {}, nullptr, &next, &halting).update, 1);
  EXPECT_EQ(halting.taken, 1);
}

}  // namespace
}  // namespace qkv::adamw_emulation_test
