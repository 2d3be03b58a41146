// The CUDA LayerNorm backward (kernels/cuda/layernorm.cuh) on the warp emulator, against the CPU kernel: the fused
// kernel for C <= 1024 (every K instance, float4 and scalar rows, dr separate, aliasing dx, or absent), the wide path
// past 1024, and the staged column sum behind dw and db. Launched as layernorm.cu launches them.
// Tolerances: dx within 1e-5 * max(1, |cpu|); dw and db within 1e-5 of the sum of their terms' magnitudes (the
// CPU's order is the kernels' too, so they agree to the rounding of single terms; an element near 0 that sums
// terms in the tens still carries their rounding).
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/layernorm.cuh"  // nvcc's #pragma unroll: -Wno-unknown-pragmas here (CMakeLists.txt)
#include "kernels/kernels.h"
#include "test_util.h"

namespace qkv::layernorm_emulation_test {
namespace {

namespace kc = kernels::cuda;
using test::near;
using test::randn;

struct Buffers {
  std::vector<float> dx, dr, dw, db;
};

template <int K, bool kVec>
void fused(float* partial, float* dx, const float* dr, const float* dy, const float* x, const float* w,
           const float* mean, const float* rstd, int rows, int C) {
  emu::launch({static_cast<unsigned>(kc::column_blocks(rows)), 1, 1}, kc::kThreads,
              2 * static_cast<size_t>(kc::kTileRows) * C * sizeof(float),
              [&] { kc::layernorm_backward_kernel<K, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C); });
}

template <bool kVec>
void fused_for_c(float* partial, float* dx, const float* dr, const float* dy, const float* x, const float* w,
                 const float* mean, const float* rstd, int rows, int C) {
  const int k = (C + 4 * kc::kWarp - 1) / (4 * kc::kWarp);
  if (k <= 1) return fused<1, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
  if (k <= 2) return fused<2, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
  if (k <= 3) return fused<3, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
  if (k <= 4) return fused<4, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
  if (k <= 6) return fused<6, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
  fused<kc::kFusedMaxK, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
}

// layernorm_backward's launches, emulated. vec as the host decides it (every row buffer 16-byte aligned).
void emulate(float* dx, float* dw, float* db, const float* dr, const float* dy, const float* x, const float* w,
             const float* mean, const float* rstd, int rows, int C, bool vec) {
  const int blocks = kc::column_blocks(rows);
  std::vector<float> partial(static_cast<size_t>(blocks) * 2 * C, std::nanf(""));
  if (C <= kc::kFusedMaxC) {
    if (vec)
      fused_for_c<true>(partial.data(), dx, dr, dy, x, w, mean, rstd, rows, C);
    else
      fused_for_c<false>(partial.data(), dx, dr, dy, x, w, mean, rstd, rows, C);
  } else {
    emu::launch(
        {static_cast<unsigned>(blocks), static_cast<unsigned>((C + kc::kColumnThreads - 1) / kc::kColumnThreads), 1},
        kc::kColumnThreads, 0, [&] { kc::layernorm_columns_kernel(partial.data(), dy, x, mean, rstd, rows, C); });
    emu::launch({static_cast<unsigned>((rows + kc::kRowsPerBlock - 1) / kc::kRowsPerBlock), 1, 1}, kc::kThreads, 0,
                [&] { kc::layernorm_backward_wide_kernel(dx, dr, dy, x, w, mean, rstd, rows, C); });
  }
  emu::launch({static_cast<unsigned>((2 * C + kc::kSumColumns - 1) / kc::kSumColumns), 1, 1}, kc::kThreads, 0,
              [&] { kc::add_column_sums_kernel(dw, db, partial.data(), blocks, C, 2 * C); });
}

enum class Dr { Separate, AliasesDx, Absent };

void check_case(int rows, int C, Dr mode, bool aligned, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " C " << C << " dr "
                                    << (mode == Dr::Separate    ? "separate"
                                        : mode == Dr::AliasesDx ? "aliasing dx"
                                                                : "absent")
                                    << (aligned ? " float4 rows" : " rows one float off"));
  const size_t n = static_cast<size_t>(rows) * C, off = aligned ? 0 : 1;
  auto x = randn(n, seed);
  for (float& v : x) v += 2.f;
  const auto dy = randn(n, seed + 1), dr0 = randn(n, seed + 2), w = randn(C, seed + 3);
  const auto dw0 = randn(C, seed + 4), db0 = randn(C, seed + 5);
  std::vector<float> y(n), mean(rows), rstd(rows);
  const std::vector<float> b(static_cast<size_t>(C), 0.f);
  kernels::layernorm_forward(y, mean, rstd, x, w, b, rows, C);
  // The CPU: dx = dr + the LayerNorm's part; dw, db accumulate onto dw0, db0.
  std::vector<float> want_dx = mode == Dr::Absent ? std::vector<float>(n, 0.f) : dr0, want_dw = dw0, want_db = db0;
  kernels::layernorm_backward(want_dx, want_dw, want_db, mode == Dr::Absent ? CSpan() : CSpan(want_dx), dy, x, w, mean,
                              rstd, rows, C);
  // Magnitudes of dw's and db's terms.
  std::vector<double> mag_w(static_cast<size_t>(C)), mag_b(static_cast<size_t>(C));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(r) * C + c;
      mag_w[c] += std::abs(dy[i] * (x[i] - mean[r]) * rstd[r]);
      mag_b[c] += std::abs(dy[i]);
    }
  // The emulated kernels on copies placed `off` floats into 16-byte aligned vectors (x, dy, dx, dr, w).
  const auto place = [&](const std::vector<float>& v) {
    std::vector<float> p(v.size() + 4, std::nanf(""));
    std::copy(v.begin(), v.end(), p.begin() + static_cast<std::ptrdiff_t>(off));
    return p;
  };
  auto gx = place(x), gdy = place(dy), gw = place(w), gdr = place(dr0), gdx = place(std::vector<float>(n, 0.f));
  if (mode == Dr::AliasesDx) gdx = gdr;
  std::vector<float> gdw = dw0, gdb = db0;
  float* dx = gdx.data() + off;
  const float* dr = mode == Dr::Separate ? gdr.data() + off : mode == Dr::AliasesDx ? dx : nullptr;
  const bool vec = aligned && C % 4 == 0;
  emulate(dx, gdw.data(), gdb.data(), dr, gdy.data() + off, gx.data() + off, gw.data() + off, mean.data(), rstd.data(),
          rows, C, vec);
  EXPECT_TRUE(near("dx", std::vector<float>(dx, dx + n), want_dx, 1e-5, true));
  for (int c = 0; c < C; ++c) {
    ASSERT_LE(std::abs(gdw[c] - want_dw[c]), 1e-5 * (mag_w[c] + std::abs(dw0[c])) + 1e-7) << "dw[" << c << "]";
    ASSERT_LE(std::abs(gdb[c] - want_db[c]), 1e-5 * (mag_b[c] + std::abs(db0[c])) + 1e-7) << "db[" << c << "]";
  }
}

TEST(LayerNormEmulated, FusedBackwardEveryWidthInstanceAndAliasing) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 10;
  // C picks K = 1, 1, 1, 3, 4 (Seq2Seq's 512), 5 -> 6, 8; rows below, at and past the 32-row groups.
  for (int C : {3, 17, 64, 384, 512, 700, 1024})
    for (int rows : {1, 33})
      for (Dr mode : {Dr::Separate, Dr::AliasesDx, Dr::Absent}) check_case(rows, C, mode, true, seed += 10);
  // Scalar rows: C not a multiple of 4, or buffers one float off 16 bytes.
  for (int C : {515, 64})
    for (Dr mode : {Dr::Separate, Dr::AliasesDx}) check_case(70, C, mode, false, seed += 10);
}

TEST(LayerNormEmulated, WideRowsTakeTheTwoKernelPath) {
  QKV_SKIP_UNDER_ASAN();
  check_case(9, 1025, Dr::Separate, true, 900);
  check_case(3, 1300, Dr::AliasesDx, false, 910);
}

}  // namespace
}  // namespace qkv::layernorm_emulation_test
