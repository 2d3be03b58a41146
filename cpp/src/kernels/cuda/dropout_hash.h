#pragma once
// The CPU's dropout keep decision (kernels/cpu/dropout.h), callable from CUDA kernels: the same splitmix64
// finaliser of (seed, i) and the same threshold, so that a CUDA dropout mask equals the CPU's element for
// element. kernels/cpu/dropout.h is host-only (no __device__), hence this twin; the test
// tests/cpp/cuda/dropout_hash_test.cpp checks on the host that the two agree on every bit, so they cannot drift.
#include <cstdint>

#if defined(__CUDACC__)
#define QKV_HOST_DEVICE __host__ __device__
#else
#define QKV_HOST_DEVICE
#endif

namespace qkv::kernels::cuda {

QKV_HOST_DEVICE inline uint32_t dropout_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

// Elements with hash >= threshold are kept; threshold = p * 2^32 (computed on the host, passed to kernels).
inline uint32_t dropout_threshold(float p) {
  const double t = static_cast<double>(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}

}  // namespace qkv::kernels::cuda
