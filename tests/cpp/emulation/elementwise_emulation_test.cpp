// The CUDA edge ops (kernels/cuda/elementwise.cuh: add, fill, argmax of rows, mean pooling) on the warp emulator,
// against the CPU kernels, launched as elementwise.cu launches them. These are exact: the same arithmetic in the
// same order (argmax's ties go to the lower index; the pooled sums run over t in order).
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/elementwise.cuh"  // nvcc's #pragma unroll: -Wno-unknown-pragmas here (CMakeLists.txt)
#include "kernels/kernels.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::elementwise_emulation_test {
namespace {

namespace kc = kernels::cuda;
using test::randn;

emu::Dim3 grid(unsigned blocks) { return {blocks, 1, 1}; }

TEST(ElementwiseEmulated, AddAndFillCoverEveryElementOfAGridStrideLoop) {
  QKV_SKIP_UNDER_ASAN();
  for (size_t n : {size_t{1}, size_t{255}, size_t{257}, size_t{5000}}) {
    const auto a = randn(n, n), b = randn(n, n + 1);
    std::vector<float> out(n, std::nanf("")), filled(n, std::nanf(""));
    // Fewer blocks than the elements need: the grid-stride loop must cover the rest.
    const unsigned blocks = static_cast<unsigned>(std::max<size_t>(1, n / (4 * kc::kThreads)));
    emu::launch(grid(blocks), kc::kThreads, 0, [&] { kc::add_kernel(out.data(), a.data(), b.data(), n); });
    emu::launch(grid(blocks), kc::kThreads, 0, [&] { kc::fill_kernel(filled.data(), 2.5f, n); });
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], a[i] + b[i]) << "n " << n << " i " << i;
      ASSERT_EQ(filled[i], 2.5f) << "n " << n << " i " << i;
    }
  }
}

TEST(ElementwiseEmulated, ArgmaxOfRowsTakesTheFirstMaximum) {
  QKV_SKIP_UNDER_ASAN();
  for (int V : {1, 31, 33, 65, 1000})
    for (int rows : {1, 9}) {
      auto logits = randn(static_cast<size_t>(rows) * V, static_cast<uint64_t>(V * 10 + rows));
      // Ties: row 0's maximum twice (the first must win), row 1 all equal (index 0).
      if (V > 3) logits[2] = logits[V - 1] = 50.f;
      if (rows > 1)
        for (int v = 0; v < V; ++v) logits[static_cast<size_t>(V) + v] = 1.f;
      std::vector<int32_t> want(static_cast<size_t>(rows)), got(static_cast<size_t>(rows), -1);
      kernels::argmax_rows(want, logits, rows, V);
      const int per_block = kc::kThreads / kc::kWarp;
      emu::launch(grid(static_cast<unsigned>((rows + per_block - 1) / per_block)), kc::kThreads, 0,
                  [&] { kc::argmax_kernel(got.data(), logits.data(), rows, V); });
      EXPECT_EQ(got, want) << "V " << V << " rows " << rows;
    }
}

TEST(ElementwiseEmulated, MeanPoolingOverNonPadPositions) {
  QKV_SKIP_UNDER_ASAN();
  const int B = 3, T = 7, C = 37;
  const auto x = randn(static_cast<size_t>(B) * T * C, 5), dout = randn(static_cast<size_t>(B) * C, 6);
  std::vector<uint8_t> pad(static_cast<size_t>(B) * T, 0);
  Rng rng(7);
  for (auto& p : pad) p = rng.uniform() < 0.4;
  for (int t = 0; t < T; ++t) pad[static_cast<size_t>(2 * T + t)] = 1;  // batch 2: all padding -> zeros
  std::vector<float> want(static_cast<size_t>(B) * C), got(want.size(), std::nanf(""));
  std::vector<float> want_dx(x.size()), got_dx(x.size(), std::nanf(""));
  kernels::mean_pool_forward(want, x, pad.data(), B, T, C);
  kernels::mean_pool_backward(want_dx, dout, pad.data(), B, T, C);
  const size_t n = static_cast<size_t>(B) * C, n_all = x.size();
  emu::launch(grid(static_cast<unsigned>((n + kc::kThreads - 1) / kc::kThreads)), kc::kThreads, 0,
              [&] { kc::mean_pool_forward_kernel(got.data(), x.data(), pad.data(), B, T, C); });
  emu::launch(grid(kc::grid_for(n_all, kc::kThreads)), kc::kThreads, 0,
              [&] { kc::mean_pool_backward_kernel(got_dx.data(), dout.data(), pad.data(), B, T, C); });
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_dx, want_dx);
}

}  // namespace
}  // namespace qkv::elementwise_emulation_test
