#pragma once
// An embedding case as the CUDA kernels are tested on it, on the GPU (cuda/backend_ops_test.cpp) and on the warp
// emulator (emulation/embedding_emulation_test.cpp): random ids below V, tables, an upstream gradient and the
// gradients' starting values (they accumulate), with the CPU kernels' outputs, the reference.
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::test {

struct EmbeddingCase {
  static constexpr float kScale = 1.7f;
  int V, B, T, C;
  std::vector<int32_t> tokens;
  std::vector<float> wte, pos, dx, dwte0, dpos0;  // inputs
  std::vector<float> x, dwte, dpos;               // the CPU's forward, and dwte0, dpos0 after its backward

  EmbeddingCase(int V_, int B_, int T_, int C_, uint64_t& seed) : V(V_), B(B_), T(T_), C(C_) {
    const size_t rows = static_cast<size_t>(B) * T;
    Rng rng(seed);
    tokens.resize(rows);
    for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
    wte = randn(static_cast<size_t>(V) * C, seed++), pos = randn(static_cast<size_t>(T) * C, seed++);
    dx = randn(rows * C, seed++);
    dwte0 = randn(wte.size(), seed++), dpos0 = randn(pos.size(), seed++);
    x.resize(dx.size());
    dwte = dwte0, dpos = dpos0;
    kernels::embedding_forward(x, tokens.data(), wte, pos, kScale, B, T, C);
    kernels::embedding_backward(dwte, dpos, dx, tokens.data(), kScale, B, T, C);
  }
};

}  // namespace qkv::test
