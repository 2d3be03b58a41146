#include "qkv/workspace.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "qkv/error.h"

namespace qkv {
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
}

}  // namespace
}  // namespace qkv
