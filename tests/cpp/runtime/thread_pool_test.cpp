#include "qkv/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "qkv/error.h"
#include "runtime/parallel_runs.h"
#include "test_util.h"

namespace qkv::thread_pool_test {
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

// A worker that is slow to run its chunk (as when the OS deschedules it on a busy machine) does not hold
// the region up: the caller claims the chunks that are left. Each item is still run exactly once.
TEST(ThreadPool, OthersTakeOverTheChunksOfASlowThread) {
  if (max_threads() < 2) GTEST_SKIP() << "single-threaded build";
  set_num_threads(2);
  const auto caller = std::this_thread::get_id();
  const int64_t n = 800;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> by_caller{0};
  std::atomic<bool> slept{false};
  parallel_for(n, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() != caller) {
      if (!slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else {
      // Let the worker claim its first chunk, so that there is a slow thread to take over from.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!slept.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    if (std::this_thread::get_id() == caller) by_caller += e - b;
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
  ASSERT_TRUE(slept.load()) << "the worker never ran a chunk";
  // 2 threads x kPoolChunksPerThread chunks: the worker held one chunk at most while it slept, and then found none
  // left.
  EXPECT_GE(by_caller.load(), n - n / (2 * kPoolChunksPerThread));
}

// The pool notifies only threads that sleep: regions far enough apart that the workers have stopped spinning
// and blocked (1 ms > the 200 us spin) must still wake them, and chunks slow enough that the caller blocks
// waiting for the last one must still wake the caller. A lost wake-up would hang here (ctest's timeout) or leave
// the worker out of every region (checked: it runs chunks in a quarter of them at least; on the busy 2-core
// machine it may be descheduled for some).
TEST(ThreadPool, WakesWorkersAndCallerThatBlocked) {
  if (max_threads() < 2) GTEST_SKIP() << "single-threaded build";
  set_num_threads(2);
  const auto caller = std::this_thread::get_id();
  int regions_with_worker = 0;
  constexpr int kRegions = 20;
  for (int r = 0; r < kRegions; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the worker blocks in the meantime
    std::vector<std::atomic<int>> hits(8);
    std::atomic<bool> worker_ran{false};
    parallel_for(8, [&](int64_t b, int64_t e) {
      // 0.5 ms a chunk: the caller, done with its own, outlasts its spin while the worker finishes its last one.
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      if (std::this_thread::get_id() != caller) worker_ran = true;
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int i = 0; i < 8; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "region " << r << " item " << i;
    regions_with_worker += worker_ran ? 1 : 0;
  }
  EXPECT_GE(regions_with_worker, kRegions / 4) << "the sleeping worker was not woken for most regions";
}

// An exception from any chunk reaches the caller once the region is over; the pool stays usable.
TEST(ThreadPool, AChunksExceptionReachesTheCaller) {
  set_num_threads(std::min(2, max_threads()));
  for (int round = 0; round < 50; ++round) {
    std::atomic<int64_t> ran{0};
    EXPECT_THROW(parallel_for(64,
                              [&](int64_t b, int64_t e) {
                                ran += e - b;
                                if (b <= 40 && 40 < e) throw std::runtime_error("item 40");
                              }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 64);  // the other chunks still ran
  }
  std::atomic<int64_t> total{0};
  parallel_for(100, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 100);
}

TEST(ThreadPool, RunsCoverEveryIndexExactlyOnce) {
  for (int threads = 1; threads <= std::min(4, max_threads()); ++threads) {
    set_num_threads(threads);
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for_runs(n, [&](int64_t b, int64_t e) {
        ASSERT_LT(b, e);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
    }
  }
}

// Claim c takes piece (c % T) * P + c / T of the T x P equal pieces (P = kPoolChunksPerThread), so that claims
// taken in turn give each thread one contiguous run. Each call waits until the claims before its own have run, which
// makes the order of the calls the order of the claims (claims are taken in increasing order, and the thread holding
// the lowest one never waits).
TEST(ThreadPool, RunsGiveClaimsTheirPiecesInTurn) {
  if (max_threads() < 2) GTEST_SKIP() << "single-threaded build";
  set_num_threads(2);
  constexpr int64_t T = 2, P = kPoolChunksPerThread, kPieces = T * P, n = 800;
  std::atomic<int64_t> next{0};
  std::vector<int64_t> order;  // the pieces in the order their calls ran (each appended after its wait)
  std::atomic<bool> timed_out{false};
  parallel_for_runs(n, [&](int64_t b, int64_t e) {
    const int64_t r = b * kPieces / n, c = r % P * T + r / P;  // the piece, and the claim it belongs to
    EXPECT_EQ(b, n * r / kPieces);
    EXPECT_EQ(e, n * (r + 1) / kPieces);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (next.load() != c)
      if (std::chrono::steady_clock::now() > give_up) {
        timed_out = true;
        return;
      }
    order.push_back(r);
    next.store(c + 1);
  });
  ASSERT_FALSE(timed_out.load()) << "a piece ran out of its claim's turn";
  // The caller's claims 0, 2, .. read pieces 0 .. P - 1, the worker's 1, 3, .. pieces P .. 2P - 1.
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < P; ++i) expected.insert(expected.end(), {i, P + i});
  EXPECT_EQ(order, expected);
}

TEST(ThreadPool, RunsInsideARegionRunInline) {
  set_num_threads(std::min(2, max_threads()));
  std::atomic<int> calls{0}, whole{0};
  parallel_for(2, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      parallel_for_runs(100, [&](int64_t b2, int64_t e2) {
        ++calls;
        whole += b2 == 0 && e2 == 100;
      });
  });
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(whole.load(), 2);
}

// Inside a chunk the pool cannot be resized (its workers are what the region waits for): an Error, not a hang, and
// the pool works after it.
TEST(ThreadPool, ResizingInsideARegionIsRefused) {
  set_num_threads(std::min(2, max_threads()));
  std::atomic<int> refused{0};
  parallel_for(4, [&](int64_t, int64_t) {
    try {
      set_num_threads(1);
    } catch (const Error& e) {
      if (std::string(e.what()).find("was called inside a parallel_for chunk") != std::string::npos) ++refused;
    }
  });
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(num_threads(), std::min(2, max_threads()));
  std::atomic<int64_t> total{0};
  parallel_for(100, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 100);
}

TEST(ThreadPool, RejectsBadThreadCounts) {
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(max_threads() + 1), Error);
  const std::string m = test::message_of([] { set_num_threads(-3); });
  EXPECT_NE(m.find("threads = -3"), std::string::npos) << m;
}

}  // namespace
}  // namespace qkv::thread_pool_test
