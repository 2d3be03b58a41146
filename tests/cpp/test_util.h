#pragma once
// Shared helpers for the native tests: seeded random data and instruction-set sweeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "qkv/cpu.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "qkv/model.h"
#include "runtime/random.h"

// A test that needs a GPU starts with this: without one (no CUDA in this build, or no device) it is skipped
// with the reason. Only public headers: it works in every build.
#define QKV_SKIP_WITHOUT_CUDA()                                                                \
  do {                                                                                         \
    if (::qkv::cuda_device_count() == 0)                                                       \
      GTEST_SKIP() << ::qkv::cuda_unavailable_reason() << "; this test needs a GPU (skipped)"; \
  } while (0)

namespace qkv::test {

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal()) * scale;
  return v;
}

// Sets a model's weights to N(0, scale) per tensor (seeds seed, seed + 1, ...), LayerNorms left at (1, 0).
// Generation tests use 0.3 instead of the init's 0.02: logits far apart, so that no greedy choice rests on a
// difference at float rounding, and attention rows far from uniform.
template <class Model>
void randomize_weights(Model& m, uint64_t seed, float scale = 0.3f) {
  for (auto p : m.parameters()) {
    if (std::string(p.name).find("norm") != std::string::npos) continue;
    const auto r = randn(p.value.size(), seed++, scale);
    std::copy(r.begin(), r.end(), p.value.begin());
  }
}

// Runs fn once per instruction set available here (scalar included), then restores the best one.
template <class F>
void for_each_isa(F&& fn) {
  const auto isas = available_isas();
  for (const auto& isa : isas) {
    force_isa(isa);
    fn(isa);
  }
  force_isa(isas.front());
}

// The message of the qkv::Error that fn throws, or a marker that fails every find() of a real message.
inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no qkv::Error thrown)";
}

// Every parameter of a and b has the same name, size and bytes (a streamed load against the whole-file one).
inline void expect_same_parameters(Model& a, Model& b, const std::string& what) {
  const auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_STREQ(pa[i].name, pb[i].name) << what;
    ASSERT_EQ(pa[i].value.size(), pb[i].value.size()) << what << " " << pa[i].name;
    EXPECT_EQ(std::memcmp(pa[i].value.data(), pb[i].value.data(), pa[i].value.size_bytes()), 0)
        << what << ": parameter " << pa[i].name << " differs";
  }
}

}  // namespace qkv::test
