// The CUDA embedding kernels (kernels/cuda/embedding.cuh) on the warp emulator, against the CPU kernels, bit for
// bit: the forward, and the backward after the sort (cub's radix sort runs only on a GPU; here std::stable_sort
// makes the same sorted pairs: LSD radix sort is stable too): the row indices, each token's range of the sorted
// rows (absent tokens keep [0, 0)), dwte gathered per (token, column) and dpos per (t, column). Launched as
// embedding.cu launches them.
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "embedding_cases.h"
#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/kernels.h"
#include "test_util.h"

namespace qkv::embedding_emulation_test {
namespace {

namespace kc = kernels::cuda;

constexpr unsigned kThreads = kc::kEmbeddingThreads;

emu::Dim3 grid(unsigned x, unsigned y = 1) { return {x, y, 1}; }
unsigned blocks_for(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

TEST(EmbeddingEmulated, ForwardAndBackwardMatchTheCpuBitForBit) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 40;
  // (B, T): a single row, ragged rows, more rows than most vocabularies here (every token present).
  const int shapes[][2] = {{1, 1}, {3, 17}, {2, 67}};
  for (int V : {1, 3, 65, 129})
    for (const auto &[B, T] : shapes)
      for (int C : {1, 260}) {
        if (V * C > 65 * 260) continue;  // the emulator runs a fiber per thread: the large corner costs seconds
        SCOPED_TRACE(::testing::Message() << "V " << V << " B " << B << " T " << T << " C " << C);
        const int n = B * T;
        const test::EmbeddingCase e(V, B, T, C, seed);
        const std::vector<int32_t> &tokens = e.tokens;
        const auto &wte = e.wte, &pos = e.pos, &dx = e.dx;
        const auto &want_x = e.x, &want_dwte = e.dwte, &want_dpos = e.dpos;
        const float scale = test::EmbeddingCase::kScale;

        std::vector<float> x(dx.size(), std::nanf("")), dwte = e.dwte0, dpos = e.dpos0;
        const size_t elems = x.size();
        emu::launch(grid(std::max(1u, blocks_for(elems) / 3)), kThreads, 0, [&] {
          kc::embedding_forward_kernel(x.data(), tokens.data(), wte.data(), pos.data(), scale, T, C, elems);
        });
        EXPECT_EQ(x, want_x);

        std::vector<int32_t> rows(static_cast<size_t>(n), -1);
        emu::launch(grid(blocks_for(rows.size())), kThreads, 0, [&] { kc::row_index_kernel(rows.data(), n); });
        std::vector<int32_t> expect_rows(rows.size());
        std::iota(expect_rows.begin(), expect_rows.end(), 0);
        ASSERT_EQ(rows, expect_rows);
        // The sort's output: (token, row) pairs ordered by token, rows increasing within a token.
        std::stable_sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) {
          return tokens[static_cast<size_t>(a)] < tokens[static_cast<size_t>(b)];
        });
        std::vector<int32_t> sorted(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) sorted[i] = tokens[static_cast<size_t>(rows[i])];

        std::vector<int32_t> begin(static_cast<size_t>(V), 0), end(static_cast<size_t>(V), 0);
        emu::launch(grid(blocks_for(rows.size())), kThreads, 0,
                    [&] { kc::token_ranges_kernel(begin.data(), end.data(), sorted.data(), n); });
        for (int v = 0; v < V; ++v) {
          const auto first = std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin();
          const auto last = std::upper_bound(sorted.begin(), sorted.end(), v) - sorted.begin();
          ASSERT_EQ(end[v] - begin[v], last - first) << "token " << v;
          if (first != last) {
            ASSERT_EQ(begin[v], first) << "token " << v;
          }
        }
        emu::launch(grid(static_cast<unsigned>(V), blocks_for(static_cast<size_t>(C))), kThreads, 0, [&] {
          kc::embedding_wte_kernel(dwte.data(), dx.data(), begin.data(), end.data(), rows.data(), scale, C);
        });
        emu::launch(grid(blocks_for(pos.size())), kThreads, 0,
                    [&] { kc::embedding_pos_kernel(dpos.data(), dx.data(), B, T, C); });
        EXPECT_EQ(dwte, want_dwte);
        EXPECT_EQ(dpos, want_dpos);
      }
}

}  // namespace
}  // namespace qkv::embedding_emulation_test
