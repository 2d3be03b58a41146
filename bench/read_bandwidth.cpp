#include "read_bandwidth.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QKV_READ_AVX2 1
#endif

namespace qkv::bench {
namespace {

inline volatile uint64_t g_read_sink;

// The sum of n 64-bit words (n a multiple of 16): four independent accumulators so the adds never wait on each
// other and the loads are the only limit.
uint64_t sum_words_plain(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i < n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

#ifdef QKV_READ_AVX2
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

uint64_t sum_words(const uint64_t* p, size_t n) {
#ifdef QKV_READ_AVX2
  if (__builtin_cpu_supports("avx2")) return sum_words_avx2(p, n);
#endif
  return sum_words_plain(p, n);
}

}  // namespace

double read_bandwidth_gbs(double bytes, int threads, int trials) {
  // Each thread's share: a multiple of 16 words (128 bytes), 32-byte aligned.
  const size_t per_thread = std::max<size_t>(16, size_t(bytes / 8 / threads) / 16 * 16);
  std::vector<uint64_t*> parts(size_t(threads), nullptr);
  for (auto& p : parts) p = static_cast<uint64_t*>(std::aligned_alloc(64, per_thread * 8));
  // First touch by the thread that reads it (its NUMA node), with values the sum cannot fold away.
  auto each = [&](auto&& fn) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { fn(t); });
    for (auto& th : pool) th.join();
  };
  each([&](int t) {
    for (size_t i = 0; i < per_thread; ++i) parts[size_t(t)][i] = i * 2654435761u + uint64_t(t);
  });
  double best = 1e30;
  for (int trial = 0; trial < trials; ++trial) {
    const Timer timer;
    each([&](int t) { g_read_sink = sum_words(parts[size_t(t)], per_thread); });
    best = std::min(best, timer.seconds());
  }
  for (auto* p : parts) std::free(p);
  return double(per_thread) * 8 * threads / best / 1e9;
}

}  // namespace qkv::bench
