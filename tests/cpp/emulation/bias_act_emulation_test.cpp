// The CUDA bias + activation kernels (kernels/cuda/bias_act.cuh) on the warp emulator, against the CPU kernels, for
// every activation: the forward, the backward without db (one thread per element, and four a thread where N is a
// multiple of 4: the same values bit for bit) and with it (a thread per block of rows and column, dh written on the
// way). GELU's tanh form is written differently on each side (CUDA in scalar
// float with expf, the CPU in xsimd), so the values agree to a few float ulps, not bit for bit; far out both are
// exactly h or 0 and the derivative exactly 1 or 0.
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/bias_act.cuh"
#include "kernels/kernels.h"
#include "test_util.h"

namespace qkv::bias_act_emulation_test {
namespace {

namespace kc = kernels::cuda;
using kernels::Act;
using test::randn;

TEST(BiasActEmulated, EveryActivationMatchesTheCpuForwardAndBackward) {
  QKV_SKIP_UNDER_ASAN();
  for (Act act : {Act::Identity, Act::ReLU, Act::GELU, Act::GELUTanh})
    for (int rows : {1, 33})
      for (int N : {1, 17, 130, 132}) {
        SCOPED_TRACE(::testing::Message() << "act " << static_cast<int>(act) << " rows " << rows << " N " << N);
        const size_t n = static_cast<size_t>(rows) * N;
        auto h0 = randn(n, n + N, 3.f);
        const float far[] = {12.f, -12.f, 1e20f, -1e20f, 0.f};
        for (size_t i = 0; i < std::min<size_t>(n, 5); ++i) h0[i * 3 % n] = far[i];
        const auto b = randn(N, N + 1), da = randn(n, n + 2);
        // The CPU: h += b, a = act(h); dh = da act'(h), db = sum over rows.
        std::vector<float> h = h0, a(n), dh(n), db(N, 0.f);
        kernels::bias_act_forward(a, h, b, act, rows, N);
        kernels::bias_act_backward(dh, db, da, h, act, rows, N);
        // The emulated kernels, launched as bias_act.cu launches them.
        std::vector<float> gh = h0, ga(n, std::nanf("")), gdh(n, std::nanf("")), gdh2(n, std::nanf(""));
        const unsigned blocks = static_cast<unsigned>(std::max<size_t>(1, n / 512));
        emu::launch({blocks, 1, 1}, 256, 0,
                    [&] { kc::bias_act_forward_kernel<1>(ga.data(), gh.data(), b.data(), act, n, N); });
        EXPECT_EQ(gh, h) << "h + b: the same float add";
        EXPECT_TRUE(test::near("a", ga, a, 1e-5, true));
        emu::launch({blocks, 1, 1}, 256, 0,
                    [&] { kc::bias_act_backward_kernel<1>(gdh.data(), da.data(), gh.data(), act, n); });
        EXPECT_TRUE(test::near("dh", gdh, dh, 1e-5, true));
        if (N % 4 == 0) {  // the 16-byte kernels: the same elementwise formulas, four a thread
          std::vector<float> gh4 = h0, ga4(n, std::nanf("")), gdh4(n, std::nanf(""));
          const unsigned blocks4 = static_cast<unsigned>(std::max<size_t>(1, n / 4 / 512));
          emu::launch({blocks4, 1, 1}, 256, 0,
                      [&] { kc::bias_act_forward_kernel<4>(ga4.data(), gh4.data(), b.data(), act, n, N); });
          EXPECT_EQ(gh4, gh);
          EXPECT_EQ(ga4, ga);
          emu::launch({blocks4, 1, 1}, 256, 0,
                      [&] { kc::bias_act_backward_kernel<4>(gdh4.data(), da.data(), gh4.data(), act, n); });
          EXPECT_EQ(gdh4, gdh);
        }
        const int kb = kc::column_blocks(rows);
        std::vector<float> partial(static_cast<size_t>(kb) * N, std::nanf(""));
        emu::launch(
            {static_cast<unsigned>(kb), static_cast<unsigned>((N + kc::kColumnThreads - 1) / kc::kColumnThreads), 1},
            kc::kColumnThreads, 0,
            [&] { kc::bias_act_columns_kernel(partial.data(), gdh2.data(), da.data(), gh.data(), act, rows, N); });
        EXPECT_TRUE(test::near("dh (with db)", gdh2, dh, 1e-5, true));
        std::vector<float> gdb(N, 0.f);
        for (int k = 0; k < kb; ++k)
          for (int c = 0; c < N; ++c) gdb[c] += partial[static_cast<size_t>(k) * N + c];
        EXPECT_TRUE(test::near("db", gdb, db, 1e-5, false));
        if (act == Act::GELUTanh)
          for (size_t i = 0; i < std::min<size_t>(n, 4); ++i) {
            const size_t j = i * 3 % n;
            if (std::abs(gh[j]) < 11.f) continue;  // a bias moved it back into range
            EXPECT_EQ(ga[j], gh[j] > 0 ? gh[j] : 0.f) << "h = " << gh[j];
            EXPECT_EQ(gdh[j], gh[j] > 0 ? da[j] : 0.f) << "h = " << gh[j];
          }
      }
}

}  // namespace
}  // namespace qkv::bias_act_emulation_test
