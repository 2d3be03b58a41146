#pragma once
// What the emulated-kernel tests share: the comparison of a whole output with its reference (the count, the first
// bad element and the largest difference on failure), and the skip under AddressSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

// Fibers (swapcontext) confuse AddressSanitizer's stack tracking: the emulated kernels run in the other builds.
#if defined(__SANITIZE_ADDRESS__)
#define QKV_SKIP_UNDER_ASAN() GTEST_SKIP() << "fibers (swapcontext) confuse AddressSanitizer's stack tracking"
#else
#define QKV_SKIP_UNDER_ASAN() \
  do {                        \
  } while (0)
#endif

namespace qkv::test {

// |got - want| <= tol * max(1, |want|) element by element (elementwise) or tol * max(1, max |want|) over the
// output; infinities must match.
inline ::testing::AssertionResult near(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                                       double tol, bool elementwise) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  double scale = 1;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, static_cast<double>(std::abs(w)));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const double bound = tol * (elementwise ? std::max(1.0, std::abs(w)) : scale);
    const bool ok = std::isinf(w) ? g == w : std::abs(g - w) <= bound;
    if (!ok && bad++ == 0) first = i;
    if (std::isfinite(w) && !(std::abs(g - w) <= worst)) worst = std::abs(g - w);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " differ; first [" << first
                                       << "] = " << got[first] << ", reference " << want[first] << "; max |diff| "
                                       << worst;
}

}  // namespace qkv::test
