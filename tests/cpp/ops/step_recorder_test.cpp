// ops/step_recorder.h, the bookkeeping of a training step launched as one unit (CUDA graphs): which step of a key
// runs op by op, which is captured, which replayed; the replay's check of its walk; the staging block; the graphs
// kept per key (least recently used dropped), a failed key left op by op, and the switch.
#include "ops/step_recorder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace qkv::step_recorder_test {
namespace {

using ops::StepRecorder;
using Mode = StepRecorder::Mode;
using Op = StepRecorder::Op;

void* handle(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + i)); }

// A step of `ops` ops with signatures base, base+1, ...: captured with handle h.
void capture(StepRecorder& r, uint64_t key, int ops, uint64_t base, void* h) {
  ASSERT_EQ(r.begin(key), Mode::Capture);
  for (int i = 0; i < ops; ++i) ASSERT_EQ(r.op(base + i), Op::Run);
  EXPECT_EQ(r.captured(h), nullptr);
}

TEST(StepRecorder, EagerThenCaptureThenReplayAndTheWalkIsChecked) {
  StepRecorder r;
  EXPECT_EQ(r.begin(7), Mode::Eager);
  EXPECT_EQ(r.op(1), Op::Run);  // op by op: run, nothing recorded
  r.end_eager();
  capture(r, 7, 3, 100, handle(1));
  // A replay: the same walk skips every op and ends well.
  ASSERT_EQ(r.begin(7), Mode::Replay);
  EXPECT_EQ(r.handle(), handle(1));
  for (uint64_t s : {100, 101, 102}) EXPECT_EQ(r.op(s), Op::Skip);
  EXPECT_TRUE(r.end_replay());
  // A walk with an op of other arguments diverges; one that stops early does not end well.
  ASSERT_EQ(r.begin(7), Mode::Replay);
  EXPECT_EQ(r.op(100), Op::Skip);
  EXPECT_EQ(r.op(555), Op::Diverged);
  EXPECT_EQ(r.fail(false), handle(1));  // its graph is dropped, for the caller to destroy
  capture(r, 7, 3, 100, handle(2));     // and the key is captured again at its next step
  ASSERT_EQ(r.begin(7), Mode::Replay);
  EXPECT_EQ(r.op(100), Op::Skip);
  EXPECT_EQ(r.op(101), Op::Skip);
  EXPECT_FALSE(r.end_replay());  // a walk one op short of its capture
  EXPECT_EQ(r.fail(false), handle(2));
  EXPECT_EQ(r.counts().captured, 2);
  EXPECT_EQ(r.counts().replayed, 1);
  EXPECT_EQ(r.counts().retried, 2);
  // begin(0): op by op whatever was seen.
  EXPECT_EQ(r.begin(0), Mode::Eager);
}

TEST(StepRecorder, TheBlockIsStagedAtTheSameOffsetsAndAFullBlockIsRefused) {
  std::vector<unsigned char> block(64);
  StepRecorder r;
  r.set_block(block.data(), block.size());
  const uint64_t seed = 0x1122334455667788ull;
  const float scale = 0.25f;
  EXPECT_EQ(r.begin(1), Mode::Eager);
  EXPECT_EQ(r.stage(&seed, sizeof seed, 8), StepRecorder::kNotStaged);  // op by op: nothing staged
  r.end_eager();
  ASSERT_EQ(r.begin(1), Mode::Capture);
  EXPECT_EQ(r.stage(&scale, sizeof scale, 4), 0u);
  EXPECT_EQ(r.stage(&seed, sizeof seed, 8), 8u);  // aligned
  EXPECT_EQ(std::memcmp(block.data() + 8, &seed, sizeof seed), 0);
  EXPECT_EQ(r.used(), 16u);
  EXPECT_EQ(r.captured(handle(1)), nullptr);
  ASSERT_EQ(r.begin(1), Mode::Replay);
  EXPECT_EQ(r.stage(&scale, sizeof scale, 4), 0u);
  EXPECT_FALSE(r.end_replay());  // the walk staged fewer bytes than its capture
  EXPECT_EQ(r.fail(false), handle(1));
  ASSERT_EQ(r.begin(1), Mode::Capture);
  const std::vector<unsigned char> big(100);
  EXPECT_EQ(r.stage(big.data(), big.size(), 16), StepRecorder::kNotStaged);  // more than the block
}

TEST(StepRecorder, KeysKeepTheirGraphsUpToTheLimitLeastRecentlyUsedFirstOut) {
  StepRecorder r;
  const int n = static_cast<int>(StepRecorder::kMaxGraphs);
  for (int k = 1; k <= n; ++k) {
    EXPECT_EQ(r.begin(k), Mode::Eager);
    r.end_eager();
  }
  for (int k = 1; k <= n; ++k) capture(r, k, 1, 10 * k, handle(k));
  // Key 1 used again: key 2 is now the least recently used.
  ASSERT_EQ(r.begin(1), Mode::Replay);
  EXPECT_EQ(r.op(10), Op::Skip);
  EXPECT_TRUE(r.end_replay());
  EXPECT_EQ(r.begin(n + 1), Mode::Eager);
  r.end_eager();
  ASSERT_EQ(r.begin(n + 1), Mode::Capture);
  EXPECT_EQ(r.captured(handle(n + 1)), handle(2));  // evicted, for the caller to destroy
  EXPECT_EQ(r.begin(2), Mode::Capture);             // seen before: captured again, not run op by op first
  r.end_eager();
  for (int k : {1, 3, n + 1}) {
    ASSERT_EQ(r.begin(k), Mode::Replay) << "key " << k;
    EXPECT_EQ(r.handle(), handle(k));
    r.end_eager();
  }
}

TEST(StepRecorder, AFailedCaptureLeavesItsKeyOpByOpAndTheSwitchDropsEveryGraph) {
  StepRecorder r;
  r.begin(5), r.end_eager();
  ASSERT_EQ(r.begin(5), Mode::Capture);
  EXPECT_EQ(r.fail(true), nullptr);  // no graph to drop: it was a capture
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.begin(5), Mode::Eager);
    r.end_eager();
  }
  r.begin(6), r.end_eager();
  capture(r, 6, 2, 60, handle(6));
  const std::vector<void*> dropped = r.set_enabled(false);
  EXPECT_EQ(dropped, std::vector<void*>{handle(6)});
  EXPECT_EQ(r.begin(6), Mode::Eager);
  r.end_eager();
  EXPECT_TRUE(r.set_enabled(true).empty());
  EXPECT_EQ(r.begin(6), Mode::Capture);  // the key was seen: captured again
}

TEST(StepRecorder, SignaturesSeeEveryBakedArgumentButNotTheSeed) {
  ops::AttentionShape a{2, 5, 5, 8, 2, 24, 24, nullptr, true, 0.1f, 1};
  ops::AttentionShape b = a;
  b.seed = 99;  // a step's value, staged: not part of what the capture bakes in
  float x[4] = {};
  EXPECT_EQ(ops::StepSignature::of("attention_forward", a, Span(x, 4)),
            ops::StepSignature::of("attention_forward", b, Span(x, 4)));
  b.causal = false;
  EXPECT_NE(ops::StepSignature::of("attention_forward", a, Span(x, 4)),
            ops::StepSignature::of("attention_forward", b, Span(x, 4)));
  EXPECT_NE(ops::StepSignature::of("fill", Span(x, 4), 0.f), ops::StepSignature::of("fill", Span(x + 1, 3), 0.f));
  EXPECT_NE(ops::StepSignature::of("fill", Span(x, 4), 0.f), ops::StepSignature::of("fill", Span(x, 4), 1.f));
  EXPECT_NE(ops::StepSignature::of("fill", Span(x, 4)), ops::StepSignature::of("copy", Span(x, 4)));
}

// The per-op signatures of ops/op_list.def hash by kind: a seed and a staged scalar (stepf) are the step's
// values and left out; every other argument, the op's name and Adam's range count are in.
TEST(StepRecorder, DeclaredSignaturesHashEachKindAsDeclared) {
  float x[8] = {};
  const Span y(x, 4);
  const CSpan in(x + 4, 4);
  namespace sig = ops::signature;
  EXPECT_EQ(sig::dropout_forward(y, in, 0.1f, 1).h, sig::dropout_forward(y, in, 0.1f, 2).h);
  EXPECT_NE(sig::dropout_forward(y, in, 0.1f, 1).h, sig::dropout_forward(y, in, 0.2f, 1).h);
  EXPECT_NE(sig::dropout_forward(y, in, 0.1f, 1).h, sig::dropout_backward(y, in, 0.1f, 1).h);
  EXPECT_NE(sig::dropout_forward(y, in, 0.1f, 1).h, sig::dropout_forward(Span(x, 3), in, 0.1f, 1).h);
  int32_t t[2] = {1, 2};
  const ops::Ids ids{std::span<const int32_t>(t, 2), t};
  EXPECT_EQ(sig::crossentropy_forward_backward(y, y, in, ids, 0.5f, 2, 2, -100, 0.f).h,
            sig::crossentropy_forward_backward(y, y, in, ids, 0.25f, 2, 2, -100, 0.f).h);
  EXPECT_NE(sig::crossentropy_forward_backward(y, y, in, ids, 0.5f, 2, 2, -100, 0.f).h,
            sig::crossentropy_forward_backward(y, y, in, ids, 0.5f, 2, 2, -1, 0.f).h);
  const ops::AdamRange r[2] = {{0, 2, 0.f}, {2, 4, 0.1f}};
  const ops::AdamHyper h{1e-3f, 0.9f, 0.999f, 1e-8f, true, 1, 1.f};
  ops::AdamHyper h2 = h;
  h2.t = 2;
  const std::span<const ops::AdamRange> two(r, 2), one(r, 1);
  EXPECT_EQ(sig::adam_step(y, y, y, in, two, h, y).h, sig::adam_step(y, y, y, in, two, h, y).h);
  EXPECT_NE(sig::adam_step(y, y, y, in, two, h, y).h, sig::adam_step(y, y, y, in, one, h, y).h);
  EXPECT_NE(sig::adam_step(y, y, y, in, two, h, y).h, sig::adam_step(y, y, y, in, two, h2, y).h);
  EXPECT_NE(sig::gemm(false, false, 2, 2, 2, 1.f, x, 2, x, 2, 0.f, x, 2).h,
            sig::gemm(true, false, 2, 2, 2, 1.f, x, 2, x, 2, 0.f, x, 2).h);
}

}  // namespace
}  // namespace qkv::step_recorder_test
