#pragma once
// The counter-based keep decision of every dropout (elementwise and attention weights) on every device: one
// definition, host and device when nvcc compiles it, so that a mask is the same element for element wherever it
// is drawn. nn/dropout.h also uses the hash to give each module its own stream of masks.
#include <cstdint>

#if defined(__CUDACC__)
#define QKV_HOST_DEVICE __host__ __device__
#else
#define QKV_HOST_DEVICE
#endif

namespace qkv::ops {

// splitmix64 finaliser of (seed, i): a different, reproducible stream per seed.
QKV_HOST_DEVICE inline uint32_t dropout_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

// Elements with hash >= threshold are kept; threshold = p * 2^32.
inline uint32_t dropout_threshold(float p) {
  const double t = static_cast<double>(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}

}  // namespace qkv::ops
