#pragma once
// Helpers for the CUDA tests: the skip when no GPU is present, device buffers from one arena, and the
// comparison of a device result with the CPU op's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/arena.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/device.h"

// Every test that needs a GPU starts with this: without one it is skipped, with the reason.
#define QKV_REQUIRE_CUDA_DEVICE()                                                                   \
  do {                                                                                              \
    if (::qkv::cuda_device_count() == 0)                                                            \
      GTEST_SKIP() << ::qkv::cuda_unavailable_reason() << "; this CUDA test needs a GPU (skipped)"; \
  } while (0)

namespace qkv::test {

// Device buffers of the given sizes (floats, then ints, then bytes), all from one DeviceArena, zero-filled.
struct DeviceBuffers {
  kernels::cuda::DeviceArena arena;
  std::vector<float*> f;
  std::vector<int32_t*> i;
  std::vector<uint8_t*> b;
  DeviceBuffers(std::vector<size_t> floats, std::vector<size_t> ints = {}, std::vector<size_t> bytes = {}) {
    arena.plan([&](kernels::cuda::DeviceArena& a) {
      f.clear();
      i.clear();
      b.clear();
      for (size_t n : floats) f.push_back(a.take(n));
      for (size_t n : ints) i.push_back(a.take_ints(n));
      for (size_t n : bytes) b.push_back(static_cast<uint8_t*>(a.take_bytes(n)));
    });
  }
};

inline std::vector<float> download(const float* src, size_t n) {
  std::vector<float> out(n);
  kernels::cuda::download(out, src, "test");
  return out;
}

inline void upload_bytes(void* dst, const void* src, size_t n) {
  kernels::cuda::check_cuda(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "test", "cudaMemcpy");
}

// NaN in every element, so that an element the op fails to write fails the comparison.
inline void poison(float* dst, size_t n) { kernels::cuda::upload(dst, std::vector<float>(n, std::nanf("")), "test"); }

// |got - want| <= rtol * max(1, |want|) for every element (infinities must match exactly); on failure, the
// count, the first bad element and the largest difference.
inline ::testing::AssertionResult near(const char* what, std::span<const float> got, std::span<const float> want,
                                       double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double g = got[k], w = want[k];
    const bool ok = std::isinf(w) ? g == w : std::abs(g - w) <= rtol * std::max(1.0, std::abs(w));
    if (!ok && bad++ == 0) first = k;
    if (std::isfinite(w) && !(std::abs(g - w) <= worst)) worst = std::abs(g - w);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " differ; first [" << first
                                       << "] = " << got[first] << ", CPU " << want[first] << "; max |diff| " << worst;
}

// The same bits (NaN included): `==` on vectors fails wherever both hold a NaN, as the poisoned columns an op leaves
// unwritten do, so a determinism check compares bytes.
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |got - want| <= rtol * max(1, |want|, scale[k]): for a result that cancels terms of magnitude scale[k] (each side's
// rounding is a few ulp of the terms, not of the result), as near() otherwise.
inline ::testing::AssertionResult near_scaled(const char* what, std::span<const float> got, std::span<const float> want,
                                              std::span<const double> scale, double rtol) {
  size_t bad = 0, first = 0;
  for (size_t k = 0; k < got.size() && k < want.size(); ++k)
    if (!(std::abs(double(got[k]) - want[k]) <= rtol * std::max({1.0, std::abs(double(want[k])), scale[k]})) &&
        bad++ == 0)
      first = k;
  if (bad == 0 && got.size() == want.size()) return ::testing::AssertionSuccess();
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " differ; first [" << first
                                       << "] = " << got[first] << ", CPU " << want[first] << " (scale " << scale[first]
                                       << ")";
}

// The products' precision for one scope, back to Fp32 at its end, also when an assertion or an exception leaves
// the test early: a precision left set would run the next tests' products (and attention) in TF32 or bf16.
struct MatmulPrecisionScope {
  explicit MatmulPrecisionScope(kernels::cuda::MatmulPrecision p) { kernels::cuda::set_matmul_precision(p); }
  ~MatmulPrecisionScope() { kernels::cuda::set_matmul_precision(kernels::cuda::MatmulPrecision::Fp32); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;
};

}  // namespace qkv::test
