#include "qkv/workspace.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "qkv/error.h"

namespace qkv::workspace_test {
namespace {

TEST(Workspace, PlansAlignedDisjointZeroedBuffersOnce) {
  Workspace ws;
  Span a, b, c;
  auto fn = [&](Workspace& w) {
    a = w.take(5);
    b = w.take(100);
    c = w.take(1);
  };
  ws.plan(fn);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_GE(b.data(), a.data() + a.size());
  EXPECT_GE(c.data(), b.data() + b.size());
  for (float v : b) EXPECT_EQ(v, 0.f);
  b[3] = 7.f;
  const float* first = a.data();
  ws.plan(fn);  // the same shape again: no new allocation, buffers zeroed
  EXPECT_EQ(a.data(), first);
  EXPECT_EQ(b[3], 0.f);
}

TEST(Workspace, TakeOutsidePlanIsAnError) {
  Workspace ws;
  EXPECT_THROW(ws.take(3), Error);
  EXPECT_THROW(ws.take_shared("x", 3), Error);
}

// Shared spans with one key alias one region sized for the largest request; other keys and take()
// buffers never overlap it; the arena is the take() buffers plus one region per key.
TEST(Workspace, SharedSpansAliasPerKeyAndNothingElse) {
  Workspace ws;
  Span a, s1, s2, t, b;
  ws.plan([&](Workspace& w) {
    a = w.take(10);
    s1 = w.take_shared("grad", 40);
    t = w.take_shared("other", 7);
    s2 = w.take_shared("grad", 100);
    b = w.take(3);
  });
  EXPECT_EQ(s1.data(), s2.data());
  EXPECT_EQ(s1.size(), 40u);
  EXPECT_EQ(s2.size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s2.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  auto disjoint = [](Span x, Span y) { return x.data() + x.size() <= y.data() || y.data() + y.size() <= x.data(); };
  for (Span other : {a, t, b}) EXPECT_TRUE(disjoint(s2, other));
  EXPECT_TRUE(disjoint(t, a));
  EXPECT_TRUE(disjoint(t, b));
  EXPECT_EQ(ws.size_floats(), 16u + 16u + 112u + 16u);
  for (float v : s2) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace qkv::workspace_test
