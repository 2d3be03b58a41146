#include "qkv/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "qkv/error.h"

namespace qkv {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads = 1; threads <= std::min(4, max_threads()); ++threads) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n;
    }
  }
}

TEST(ThreadPool, NestedRegionsRunInline) {
  set_num_threads(std::min(2, max_threads()));
  std::atomic<int64_t> total{0};
  parallel_for(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel_for(10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPool, RejectsBadThreadCounts) {
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(max_threads() + 1), Error);
  try {
    set_num_threads(-3);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("threads = -3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
