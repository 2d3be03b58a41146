// Every CUDA op against the CPU op (kernels.h), the oracle, on ragged shapes (1, 3, 17, 64, 67, 257) with
// fixed-seed random inputs, the aliasing the layers use, and hard cases (all-masked rows, ignored targets,
// large logits, gaps between Adam ranges). One test per op family; outputs are poisoned with NaN first so
// that an element the GPU fails to write fails the comparison.
//   fp32: |gpu - cpu| <= 1e-5 * max(1, |cpu|) (kFp32), or for gemm 1e-5 of sum_k |a||b|, the scale of a dot
//   product's rounding, so that cancellation in the result does not make the bound meaningless.
//   TF32 gemm: kGemmTf32Tolerance (2e-3) of the same scale: TF32 keeps 10 of fp32's 23 mantissa bits, so each
//   rounded input is off by up to 2^-11 relative and each product by about 2^-10 (~1e-3) of |a||b|.
//   Bit-exact: dropout (the same hash and one multiply) and the embedding (the CPU's operation order).
// Every test skips, naming the reason, when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cuda_test_util.h"
#include "embedding_cases.h"
#include "kernels/kernels.h"
#include "ops/clip.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::cuda_backend_ops_test {
namespace {

namespace kc = kernels::cuda;
using test::DeviceBuffers;
using test::download;
using test::near;
using test::poison;
using test::randn;

constexpr double kFp32 = 1e-5;
constexpr int kSizes[] = {1, 3, 17, 64, 67, 257};

void up(float* dst, const std::vector<float>& src) { kc::upload(dst, src, "test"); }

// ---- gemm ----

void check_gemm(kc::MatmulPrecision precision) {
  const test::MatmulPrecisionScope scope(precision);
  const char* name = precision == kc::MatmulPrecision::Tf32   ? " tf32"
                     : precision == kc::MatmulPrecision::Bf16 ? " bf16"
                                                              : " fp32";
  const double tol = precision == kc::MatmulPrecision::Tf32   ? kc::kGemmTf32Tolerance
                     : precision == kc::MatmulPrecision::Bf16 ? kc::kGemmBf16Tolerance
                                                              : kFp32;
  uint64_t seed = 1;
  for (int M : {1, 17, 67, 257})
    for (int N : {1, 3, 64, 257})
      for (int K : {1, 17, 67, 257})
        for (int ta = 0; ta < 2; ++ta)
          for (int tb = 0; tb < 2; ++tb)
            for (float beta : {0.f, 0.5f}) {
              SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb
                                                << " beta " << beta << name);
              // Leading dimensions past the row length, as the layers' interleaved buffers have.
              const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
              const auto A = randn(static_cast<size_t>(ta ? K : M) * lda, seed++);
              const auto B = randn(static_cast<size_t>(tb ? N : K) * ldb, seed++);
              const auto C0 = randn(static_cast<size_t>(M) * ldc, seed++);
              std::vector<float> want = C0, scale(C0.size(), 0.f);
              kernels::gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
              std::vector<float> absA(A.size()), absB(B.size());
              for (size_t i = 0; i < A.size(); ++i) absA[i] = std::abs(A[i]);
              for (size_t i = 0; i < B.size(); ++i) absB[i] = std::abs(B[i]);
              kernels::gemm(ta, tb, M, N, K, 0.7f, absA.data(), lda, absB.data(), ldb, 0.f, scale.data(), ldc);
              DeviceBuffers d({A.size(), B.size(), C0.size()});
              up(d.f[0], A);
              up(d.f[1], B);
              if (beta != 0.f) {
                up(d.f[2], C0);
              } else {
                poison(d.f[2], C0.size());  // beta == 0 must not read C: NaN there must not leak through
              }
              kc::gemm(ta, tb, M, N, K, 0.7f, d.f[0], lda, d.f[1], ldb, beta, d.f[2], ldc);
              const auto got = download(d.f[2], C0.size());
              for (int i = 0; i < M; ++i)
                for (int j = 0; j < N; ++j) {
                  const size_t at = static_cast<size_t>(i) * ldc + j;
                  const double bound = tol * (scale[at] + std::abs(beta * C0[at])) + 1e-6;
                  ASSERT_LE(std::abs(got[at] - want[at]), bound)
                      << "C[" << i << "][" << j << "] = " << got[at] << ", CPU " << want[at];
                }
            }
}

TEST(CudaOps, GemmFp32MatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  check_gemm(kc::MatmulPrecision::Fp32);
}

TEST(CudaOps, GemmTf32WithinItsTolerance) {
  QKV_REQUIRE_CUDA_DEVICE();
  check_gemm(kc::MatmulPrecision::Tf32);
}

// Bf16 (qkv::set_cuda_precision(BF16)): cublasGemmEx with bf16 compute on the fp32 operands, within
// kGemmBf16Tolerance of sum |a||b| over the same sweep.
TEST(CudaOps, GemmBf16WithinItsTolerance) {
  QKV_REQUIRE_CUDA_DEVICE();
  check_gemm(kc::MatmulPrecision::Bf16);
}

// gemm_bias: the bias (and with relu, a ReLU) in cuBLASLt's epilogue, every precision, against the CPU's product
// plus bias (bounds as check_gemm's, of sum |x||w| + |b|; the ReLU of a value within them is within them). With
// 16-byte aligned operands cuBLASLt must take it (the path is meant to run on an H100, not fall back unseen); a bias
// at an odd float offset may run or fall back, and either way the result must be right once the fallback (what the
// backend does then) is applied.
TEST(CudaOps, GemmBiasThroughCublasLtMatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 70;
  for (bool relu : {false, true})
    for (kc::MatmulPrecision precision :
         {kc::MatmulPrecision::Fp32, kc::MatmulPrecision::Tf32, kc::MatmulPrecision::Bf16}) {
      const test::MatmulPrecisionScope scope(precision);
      const double tol = precision == kc::MatmulPrecision::Tf32   ? kc::kGemmTf32Tolerance
                         : precision == kc::MatmulPrecision::Bf16 ? kc::kGemmBf16Tolerance
                                                                  : kFp32;
      for (int rows : {1, 17, 257})
        for (int in : {1, 17, 384})
          for (int out : {3, 64, 257})
            for (int offset : {0, 1}) {
              SCOPED_TRACE(::testing::Message()
                           << "rows " << rows << " in " << in << " out " << out << " bias offset " << offset
                           << " precision " << static_cast<int>(precision) << " relu " << relu);
              const auto x = randn(static_cast<size_t>(rows) * in, seed++),
                         w = randn(static_cast<size_t>(out) * in, seed++);
              const auto b = randn(out + 1, seed++);
              std::vector<float> want(static_cast<size_t>(rows) * out), scale(want.size());
              kernels::gemm(false, true, rows, out, in, 1.f, x.data(), in, w.data(), in, 0.f, want.data(), out);
              std::vector<float> ax(x.size()), aw(w.size());
              for (size_t i = 0; i < x.size(); ++i) ax[i] = std::abs(x[i]);
              for (size_t i = 0; i < w.size(); ++i) aw[i] = std::abs(w[i]);
              kernels::gemm(false, true, rows, out, in, 1.f, ax.data(), in, aw.data(), in, 0.f, scale.data(), out);
              for (int r = 0; r < rows; ++r)
                for (int j = 0; j < out; ++j) {
                  want[static_cast<size_t>(r) * out + j] += b[static_cast<size_t>(j + offset)];
                  scale[static_cast<size_t>(r) * out + j] += std::abs(b[static_cast<size_t>(j + offset)]);
                }
              if (relu)
                for (float& v : want) v = std::max(v, 0.f);
              DeviceBuffers d({x.size(), w.size(), b.size(), want.size()});
              up(d.f[0], x);
              up(d.f[1], w);
              up(d.f[2], b);
              poison(d.f[3], want.size());
              const bool ran = kc::gemm_bias(rows, out, in, d.f[0], d.f[1], d.f[2] + offset, d.f[3], relu);
              if (offset == 0 && precision == kc::MatmulPrecision::Fp32) {
                EXPECT_TRUE(ran) << "cuBLASLt fell back";
              }
              if (!ran) {
                kc::gemm(false, true, rows, out, in, 1.f, d.f[0], in, d.f[1], in, 0.f, d.f[3], out);
                kc::bias_act_forward(d.f[3], d.f[3], d.f[2] + offset,
                                     relu ? kernels::Act::ReLU : kernels::Act::Identity, rows, out);
              }
              const auto got = download(d.f[3], want.size());
              for (size_t i = 0; i < got.size(); ++i)
                ASSERT_LE(std::abs(got[i] - want[i]), tol * scale[i] + 1e-6)
                    << "h[" << i << "] = " << got[i] << ", CPU " << want[i];
            }
    }
}

// ---- LayerNorm ----

// The magnitude of the terms dx's formula subtracts, per element: dx = rstd (g - mean(g) - xhat mean(g xhat)) with
// g = dy w, so rstd (|g| + |mean(g)| + |xhat mean(g xhat)|). Where the row barely varies (C = 1: xhat = 0 and rstd =
// 1/sqrt(eps) = 316) dx is 0 plus each side's rounding of those terms (the CPU's contracted fma(dy, w, -mean(g)),
// the GPU's order), a few ulp of 316 |g|: dx is compared within kFp32 of this scale where it exceeds |dx|. Elsewhere
// the terms are about |dx| and the bound is kFp32 of max(1, |dx|) as before.
std::vector<double> dx_scale(const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& w,
                             const std::vector<float>& mean, const std::vector<float>& rstd, int rows, int C) {
  std::vector<double> scale(dy.size());
  for (int r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r) * C;
    const auto xhat = [&](int i) { return (double(x[o + i]) - mean[r]) * rstd[r]; };
    double mg = 0, mgx = 0;
    for (int i = 0; i < C; ++i) mg += double(dy[o + i]) * w[i], mgx += double(dy[o + i]) * w[i] * xhat(i);
    mg /= C, mgx /= C;
    for (int i = 0; i < C; ++i)
      scale[o + i] = rstd[r] * (std::abs(double(dy[o + i]) * w[i]) + std::abs(mg) + std::abs(xhat(i) * mgx));
  }
  return scale;
}

TEST(CudaOps, LayerNormForwardBackwardMatchTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 100;
  for (int rows : kSizes)
    for (int C : kSizes) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " C " << C);
      const size_t n = static_cast<size_t>(rows) * C;
      auto x = randn(n, seed++), f = randn(n, seed++), w = randn(C, seed++), b = randn(C, seed++);
      for (auto& v : x) v += 3.f;  // a mean far from 0: the two-pass variance matters
      const auto dy = randn(n, seed++), dr = randn(n, seed++), dw0 = randn(C, seed++), db0 = randn(C, seed++);
      // CPU: residual + LN forward, then the backward with dr (accumulating into dw0, db0), then without dr.
      std::vector<float> r(n), y(n), mean(rows), rstd(rows), y2(n), mean2(rows), rstd2(rows);
      kernels::residual_layernorm_forward(r, y, mean, rstd, x, f, w, b, rows, C);
      kernels::layernorm_forward(y2, mean2, rstd2, x, w, b, rows, C);
      std::vector<float> dx = dr, dw = dw0, db = db0, dx2(n);
      kernels::layernorm_backward(dx, dw, db, dx, dy, r, w, mean, rstd, rows, C);  // dr aliases dx
      kernels::layernorm_backward(dx2, dw, db, {}, dy, r, w, mean, rstd, rows, C);
      // GPU, the same sequence.
      const size_t c = static_cast<size_t>(C), nr = static_cast<size_t>(rows);
      DeviceBuffers d({n, n, c, c, n, n, nr, nr, n, n, c, c, n, n, kc::layernorm_backward_scratch_size(rows, C)});
      float *dx_, *dw_, *db_, *dy_, *r_, *y_, *mean_, *rstd_, *x_, *f_, *w_, *b_, *y2_, *dx2_, *s_;
      x_ = d.f[0], f_ = d.f[1], w_ = d.f[2], b_ = d.f[3], r_ = d.f[4], y_ = d.f[5], mean_ = d.f[6], rstd_ = d.f[7];
      dy_ = d.f[8], dx_ = d.f[9], dw_ = d.f[10], db_ = d.f[11], y2_ = d.f[12], dx2_ = d.f[13], s_ = d.f[14];
      up(x_, x), up(f_, f), up(w_, w), up(b_, b), up(dy_, dy), up(dx_, dr), up(dw_, dw0), up(db_, db0);
      poison(r_, n), poison(y_, n), poison(mean_, rows), poison(rstd_, rows), poison(y2_, n), poison(dx2_, n);
      kc::residual_layernorm_forward(r_, y_, mean_, rstd_, x_, f_, w_, b_, rows, C);
      EXPECT_TRUE(near("r", download(r_, n), r, kFp32));
      EXPECT_TRUE(near("y", download(y_, n), y, kFp32));
      EXPECT_TRUE(near("mean", download(mean_, rows), mean, kFp32));
      EXPECT_TRUE(near("rstd", download(rstd_, rows), rstd, kFp32));
      kc::layernorm_forward(y2_, mean_, rstd_, x_, w_, b_, rows, C);
      EXPECT_TRUE(near("y (no residual)", download(y2_, n), y2, kFp32));
      kc::residual_layernorm_forward(r_, y_, mean_, rstd_, x_, f_, w_, b_, rows, C);  // mean, rstd of r again
      kc::layernorm_backward(dx_, dw_, db_, s_, dx_, dy_, r_, w_, mean_, rstd_, rows, C);
      kc::layernorm_backward(dx2_, dw_, db_, s_, nullptr, dy_, r_, w_, mean_, rstd_, rows, C);
      const auto scale = dx_scale(r, dy, w, mean, rstd, rows, C);
      EXPECT_TRUE(test::near_scaled("dx (dr aliased)", download(dx_, n), dx, scale, kFp32));
      EXPECT_TRUE(test::near_scaled("dx (no dr)", download(dx2_, n), dx2, scale, kFp32));
      EXPECT_TRUE(near("dw (accumulated twice)", download(dw_, C), dw, kFp32));
      EXPECT_TRUE(near("db (accumulated twice)", download(db_, C), db, kFp32));
      // In place: r aliasing x, as pre-LN stacks call it.
      kc::residual_layernorm_forward(x_, y_, mean_, rstd_, x_, f_, w_, b_, rows, C);
      EXPECT_TRUE(near("r (in place over x)", download(x_, n), r, kFp32));
      EXPECT_TRUE(near("y (in place)", download(y_, n), y, kFp32));
    }
}

// The fused backward's paths (layernorm.cu): one block per 32-row group, float4 rows (C % 4 == 0, aligned) or
// scalar (C odd, or every row buffer one float off), K = ceil(C / 128) float4's a lane up to C = 1024, the
// two-kernel path past it (1025); groups ragged (31, 33, 1000 rows) and the char GPT's 16384 rows. The mean and
// rstd are the CPU's, so that only the backward is compared. dx: kFp32 of max(1, |dx|, dx_scale). dw and db sum `rows`
// terms (three calls accumulate): bounded, like gemm's sums, by kFp32 of the sum of |terms| (at 16384 rows an
// element near 0 still carries the rounding of partial sums in the hundreds). The GPU adds them in the CPU's
// order with the CPU's fma(dy, xhat, dw), so on an FMA CPU they agree far more closely; the scalar (offset)
// path must give the float4 path's dw and db bit for bit, and a second run the first run's bits.
TEST(CudaOps, LayerNormBackwardFusedShapes) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 150;
  for (int C : {1, 3, 17, 64, 384, 512, 515, 1024, 1025})
    for (int rows : {1, 31, 33, 1000, 16384}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " C " << C);
      const size_t n = static_cast<size_t>(rows) * C, c = static_cast<size_t>(C), nr = static_cast<size_t>(rows);
      auto x = randn(n, seed++);
      for (auto& v : x) v += 3.f;
      const auto w = randn(c, seed++), b = randn(c, seed++), dy = randn(n, seed++), dr = randn(n, seed++);
      const auto dw0 = randn(c, seed++), db0 = randn(c, seed++);
      std::vector<float> y(n), mean(nr), rstd(nr);
      kernels::layernorm_forward(y, mean, rstd, x, w, b, rows, C);
      // CPU: dr aliasing dx, no dr, dr apart; dw and db accumulate over the three.
      std::vector<float> dx_alias = dr, dx_none(n), dx_apart(n), dw = dw0, db = db0;
      kernels::layernorm_backward(dx_alias, dw, db, dx_alias, dy, x, w, mean, rstd, rows, C);
      kernels::layernorm_backward(dx_none, dw, db, {}, dy, x, w, mean, rstd, rows, C);
      kernels::layernorm_backward(dx_apart, dw, db, dr, dy, x, w, mean, rstd, rows, C);
      std::vector<double> sw(c), sb(c);  // the scale of each sum: |dw0| + 3 sum |dy xhat|, likewise db
      for (size_t i = 0; i < c; ++i) sw[i] = std::abs(dw0[i]), sb[i] = std::abs(db0[i]);
      for (size_t r = 0; r < nr; ++r)
        for (size_t i = 0; i < c; ++i) {
          const double xhat = (static_cast<double>(x[r * c + i]) - mean[r]) * rstd[r];
          sw[i] += 3 * std::abs(dy[r * c + i] * xhat), sb[i] += 3 * std::abs(dy[r * c + i]);
        }
      const auto sums_near = [&](const char* what, const std::vector<float>& got, const std::vector<float>& want,
                                 const std::vector<double>& scale) {
        for (size_t i = 0; i < c; ++i)
          ASSERT_LE(std::abs(got[i] - want[i]), kFp32 * std::max(1.0, scale[i]))
              << what << "[" << i << "] = " << got[i] << ", CPU " << want[i];
      };
      // GPU. Row buffers get one float more, for the offset (scalar) run.
      const size_t s = kc::layernorm_backward_scratch_size(rows, C);
      DeviceBuffers d({n + 1, n + 1, n + 1, n + 1, c + 1, nr, nr, c, c, s, n + 1});
      float *x_ = d.f[0], *dy_ = d.f[1], *dr_ = d.f[2], *dx_ = d.f[3], *w_ = d.f[4], *mean_ = d.f[5];
      float *rstd_ = d.f[6], *dw_ = d.f[7], *db_ = d.f[8], *s_ = d.f[9], *dx2_ = d.f[10];
      up(mean_, mean), up(rstd_, rstd);
      // run(offset): the three calls on buffers `offset` floats in; returns dx of each, dw, db.
      const auto run = [&](int off) {
        up(x_ + off, x), up(dy_ + off, dy), up(dr_ + off, dr), up(w_ + off, w), up(dw_, dw0), up(db_, db0);
        std::vector<std::vector<float>> out;
        up(dx_ + off, dr);
        kc::layernorm_backward(dx_ + off, dw_, db_, s_, dx_ + off, dy_ + off, x_ + off, w_ + off, mean_, rstd_, rows,
                               C);
        out.push_back(download(dx_ + off, n));
        poison(dx2_, n + 1);
        kc::layernorm_backward(dx2_ + off, dw_, db_, s_, nullptr, dy_ + off, x_ + off, w_ + off, mean_, rstd_, rows, C);
        out.push_back(download(dx2_ + off, n));
        poison(dx2_, n + 1);
        kc::layernorm_backward(dx2_ + off, dw_, db_, s_, dr_ + off, dy_ + off, x_ + off, w_ + off, mean_, rstd_, rows,
                               C);
        out.push_back(download(dx2_ + off, n));
        out.push_back(download(dw_, c));
        out.push_back(download(db_, c));
        return out;
      };
      const auto got = run(0);
      const auto scale = dx_scale(x, dy, w, mean, rstd, rows, C);
      EXPECT_TRUE(test::near_scaled("dx (dr aliased)", got[0], dx_alias, scale, kFp32));
      EXPECT_TRUE(test::near_scaled("dx (no dr)", got[1], dx_none, scale, kFp32));
      EXPECT_TRUE(test::near_scaled("dx (dr apart)", got[2], dx_apart, scale, kFp32));
      sums_near("dw", got[3], dw, sw);
      sums_near("db", got[4], db, sb);
      EXPECT_EQ(run(0), got) << "a second run differs: not deterministic";
      const auto off = run(1);  // every row buffer one float off 16-byte alignment: the scalar path
      EXPECT_TRUE(test::near_scaled("dx (offset, dr aliased)", off[0], dx_alias, scale, kFp32));
      EXPECT_TRUE(test::near_scaled("dx (offset, no dr)", off[1], dx_none, scale, kFp32));
      EXPECT_TRUE(test::near_scaled("dx (offset, dr apart)", off[2], dx_apart, scale, kFp32));
      EXPECT_EQ(off[3], got[3]) << "dw: the scalar path's partials differ from the float4 path's";
      EXPECT_EQ(off[4], got[4]) << "db: the scalar path's partials differ from the float4 path's";
    }
}

// ---- bias + activation, dropout ----

TEST(CudaOps, BiasActMatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 200;
  for (auto act : {kernels::Act::Identity, kernels::Act::ReLU, kernels::Act::GELU, kernels::Act::GELUTanh})
    for (bool bias : {true, false})
      for (int rows : kSizes)
        for (int N : kSizes) {
          SCOPED_TRACE(::testing::Message()
                       << "act " << static_cast<int>(act) << " bias " << bias << " rows " << rows << " N " << N);
          const size_t n = static_cast<size_t>(rows) * N;
          auto h0 = randn(n, seed++, 2.f);
          for (size_t i = 0; i < n; i += 7) h0[i] = 0.f;  // ReLU's choice at exactly 0
          const auto b = randn(N, seed++), da = randn(n, seed++), db0 = randn(N, seed++);
          std::vector<float> h = h0, a(n), dh(n), db = db0;
          kernels::bias_act_forward(a, h, bias ? CSpan(b) : CSpan{}, act, rows, N);
          kernels::bias_act_backward(dh, db, da, h, act, rows, N);
          const size_t nb = static_cast<size_t>(N);
          DeviceBuffers d({n, n, nb, n, n, nb, kc::bias_act_backward_scratch_size(rows, N)});
          float *h_ = d.f[0], *a_ = d.f[1], *b_ = d.f[2], *da_ = d.f[3], *dh_ = d.f[4], *db_ = d.f[5], *s_ = d.f[6];
          up(h_, h0), up(b_, b), up(da_, da), up(db_, db0), poison(a_, n), poison(dh_, n);
          kc::bias_act_forward(a_, h_, bias ? b_ : nullptr, act, rows, N);
          EXPECT_TRUE(near("h (bias added)", download(h_, n), h, kFp32));
          EXPECT_TRUE(near("a", download(a_, n), a, kFp32));
          kc::bias_act_backward(dh_, db_, s_, da_, h_, act, rows, N);
          EXPECT_TRUE(near("dh", download(dh_, n), dh, kFp32));
          EXPECT_TRUE(near("db", download(db_, N), db, kFp32));
          // dh aliasing da, and no db: dh alone.
          kc::bias_act_backward(da_, nullptr, nullptr, da_, h_, act, rows, N);
          EXPECT_TRUE(near("dh (in place, no db)", download(da_, n), dh, kFp32));
        }
}

TEST(CudaOps, DropoutMasksEqualTheCpusExactly) {
  QKV_REQUIRE_CUDA_DEVICE();
  for (float p : {0.f, 0.1f, 0.5f})
    for (size_t n : {1, 17, 257, 100003}) {
      SCOPED_TRACE(::testing::Message() << "p " << p << " n " << n);
      const auto x = randn(n, 300 + n);
      std::vector<float> y(n), dx(n);
      kernels::dropout_forward(y, x, p, 1234);
      kernels::dropout_backward(dx, x, p, 99);
      DeviceBuffers d({n, n});
      up(d.f[0], x), poison(d.f[1], n);
      kc::dropout_forward(d.f[1], d.f[0], n, p, 1234);
      EXPECT_EQ(download(d.f[1], n), y);
      kc::dropout_backward(d.f[0], d.f[0], n, p, 99);  // in place
      EXPECT_EQ(download(d.f[0], n), dx);
    }
}

// ---- attention ----

struct AttentionCase {
  int B, Tq, Tk, H, hs;
  bool causal, pad;
  float dropout;
  int q_pos = 0, extra_rows = 0;  // a KV cache: queries at q_pos.., k_rows = Tk + extra_rows
};

// fwd_tol: the forward's bound (kFp32; TF32 tensor cores: kGemmTf32Tolerance, the products' rounding).
void check_attention(const AttentionCase& c, uint64_t seed, double fwd_tol = kFp32) {
  SCOPED_TRACE(::testing::Message() << "B " << c.B << " Tq " << c.Tq << " Tk " << c.Tk << " H " << c.H << " hs " << c.hs
                                    << " causal " << c.causal << " pad " << c.pad << " dropout " << c.dropout
                                    << " q_pos " << c.q_pos);
  const int C = c.H * c.hs, ldq = C + 5, ldkv = 2 * C, krows = c.Tk + c.extra_rows;
  const size_t nq = static_cast<size_t>(c.B) * c.Tq * ldq, nkv = static_cast<size_t>(c.B) * krows * ldkv;
  const size_t nout = static_cast<size_t>(c.B) * c.Tq * C, nl = static_cast<size_t>(c.B) * c.H * c.Tq;
  const size_t natt = nl * c.Tk;
  const auto q = randn(nq, seed), kv = randn(nkv, seed + 1), dout = randn(nout, seed + 2);
  std::vector<uint8_t> pad(static_cast<size_t>(c.B) * krows, 0);
  if (c.pad) {
    Rng rng(seed + 3);
    for (auto& p : pad) p = rng.uniform() < 0.3;
    for (int s = 0; s < krows; ++s) pad[s] = 1;  // batch 0: every key padded (all-masked rows)
  }
  kernels::AttentionShape s{c.B,      c.Tq,      c.Tk, C,       c.H,  ldq, ldkv, c.pad ? pad.data() : nullptr,
                            c.causal, c.dropout, 77,   c.q_pos, krows};
  // CPU
  std::vector<float> out(nout), lse(nl), att(natt), dq(nq, 0.f), dkv(nkv, 0.f);
  std::vector<float> scratch(kernels::attention_scratch_size(c.Tq, c.Tk, c.hs, 1));
  kernels::attention_forward(out, lse, scratch, q.data(), kv.data(), kv.data() + C, s);
  kernels::attention_backward(dq.data(), dkv.data(), dkv.data() + C, scratch, dout, q.data(), kv.data(), kv.data() + C,
                              out, lse, s);
  kernels::attention_weights(att, q.data(), kv.data(), s);
  // GPU
  DeviceBuffers d({nq, nkv, nout, nout, nl, natt, nq, nkv, kc::attention_backward_scratch_size(s)}, {}, {pad.size()});
  float *q_ = d.f[0], *kv_ = d.f[1], *dout_ = d.f[2], *out_ = d.f[3], *lse_ = d.f[4], *att_ = d.f[5];
  float *dq_ = d.f[6], *dkv_ = d.f[7], *s_ = d.f[8];
  up(q_, q), up(kv_, kv), up(dout_, dout);
  poison(out_, nout), poison(lse_, nl), poison(att_, natt), poison(dq_, nq), poison(dkv_, nkv);
  kernels::AttentionShape sd = s;
  if (c.pad) {
    sd.key_pad = d.b[0];
    test::upload_bytes(d.b[0], pad.data(), pad.size());
  }
  kc::attention_forward(out_, lse_, q_, kv_, kv_ + C, sd);
  EXPECT_TRUE(near("out", download(out_, nout), out, fwd_tol));
  EXPECT_TRUE(near("lse", download(lse_, nl), lse, fwd_tol));
  kc::attention_weights(att_, q_, kv_, sd);
  EXPECT_TRUE(near("weights", download(att_, natt), att, kFp32));
  kc::attention_backward(dq_, dkv_, dkv_ + C, s_, dout_, q_, kv_, kv_ + C, out_, lse_, sd);
  // Only the heads' columns are written: dq's first C of each ldq-wide row, dk and dv in rows < Tk.
  const auto gq = download(dq_, nq), gkv = download(dkv_, nkv);
  std::vector<float> gq_c, wq_c, gkv_c, wkv_c;
  for (size_t r = 0; r < static_cast<size_t>(c.B) * c.Tq; ++r)
    for (int i = 0; i < C; ++i) gq_c.push_back(gq[r * ldq + i]), wq_c.push_back(dq[r * ldq + i]);
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.Tk; ++t)
      for (int i = 0; i < 2 * C; ++i) {
        const size_t at = (static_cast<size_t>(b) * krows + t) * ldkv + i;
        gkv_c.push_back(gkv[at]), wkv_c.push_back(dkv[at]);
      }
  EXPECT_TRUE(near("dq", gq_c, wq_c, kFp32));
  EXPECT_TRUE(near("dk and dv", gkv_c, wkv_c, kFp32));
}

TEST(CudaOps, AttentionMatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  const AttentionCase cases[] = {
      {1, 1, 1, 1, 1, false, false, 0.f},           {2, 3, 17, 2, 3, false, false, 0.f},
      {2, 17, 17, 3, 64, true, false, 0.f},         {1, 67, 67, 2, 67, true, true, 0.f},
      {2, 64, 257, 1, 128, false, true, 0.f},       {3, 257, 257, 2, 17, true, false, 0.f},
      {2, 64, 64, 6, 64, true, false, 0.1f},        {2, 17, 67, 2, 32, false, true, 0.5f},
      {2, 3, 67, 2, 64, true, false, 0.f, 64, 5},  // a KV cache: 3 new queries after 64 cached keys
      {1, 1, 257, 4, 32, true, false, 0.f, 256, 0},
  };
  uint64_t seed = 400;
  for (const auto& c : cases) check_attention(c, seed += 10);
}

// ---- embedding ----

TEST(CudaOps, EmbeddingMatchesTheCpuBitForBit) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 500;
  for (int V : {1, 3, 65, 5000})
    for (int B : {1, 3})
      for (int T : {1, 17, 67})
        for (int C : {1, 17, 64}) {
          SCOPED_TRACE(::testing::Message() << "V " << V << " B " << B << " T " << T << " C " << C);
          const int rows = B * T;
          const test::EmbeddingCase e(V, B, T, C, seed);
          const std::vector<int32_t>& tokens = e.tokens;
          const auto &wte = e.wte, &pos = e.pos, &dx = e.dx, &dwte0 = e.dwte0, &dpos0 = e.dpos0;
          const auto &x = e.x, &dwte = e.dwte, &dpos = e.dpos;
          const float scale = test::EmbeddingCase::kScale;
          // The scratch one byte past a 256-byte boundary: the op aligns its pieces itself.
          const size_t scratch_bytes = kc::embedding_backward_scratch_bytes(V, rows);
          DeviceBuffers d({x.size(), wte.size(), pos.size(), dx.size(), wte.size(), pos.size()}, {tokens.size()},
                          {scratch_bytes + 1});
          float *x_ = d.f[0], *wte_ = d.f[1], *pos_ = d.f[2], *dx_ = d.f[3], *dwte_ = d.f[4], *dpos_ = d.f[5];
          kc::upload_ids(d.i[0], tokens, V, std::nullopt, "test", "tokens");
          up(wte_, wte), up(pos_, pos), up(dx_, dx), up(dwte_, dwte0), up(dpos_, dpos0), poison(x_, x.size());
          kc::embedding_forward(x_, d.i[0], wte_, pos_, scale, B, T, C);
          EXPECT_EQ(download(x_, x.size()), x);
          kc::embedding_backward(dwte_, dpos_, dx_, d.i[0], V, scale, B, T, C, d.b[0] + 1, scratch_bytes);
          EXPECT_EQ(download(dwte_, dwte.size()), dwte);
          EXPECT_EQ(download(dpos_, dpos.size()), dpos);
        }
}

// ---- cross-entropy ----

TEST(CudaOps, CrossEntropyMatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 600;
  for (float smoothing : {0.f, 0.1f})
    for (int rows : {1, 3, 17, 67})
      for (int V : kSizes) {
        SCOPED_TRACE(::testing::Message() << "smoothing " << smoothing << " rows " << rows << " V " << V);
        const size_t n = static_cast<size_t>(rows) * V;
        auto logits = randn(n, seed++, 3.f);
        logits[0] += 1e4f;  // a huge logit: no overflow
        Rng rng(seed++);
        std::vector<int32_t> targets(static_cast<size_t>(rows));
        for (auto& t : targets) t = rng.uniform() < 0.2 ? -100 : static_cast<int32_t>(rng.next_u64() % V);
        std::vector<float> losses(rows), losses2(rows), dlogits(n);
        kernels::crossentropy_forward(losses, logits, targets.data(), rows, V, -100, smoothing);
        kernels::crossentropy_forward_backward(losses2, dlogits, logits, targets.data(), 0.25f, rows, V, -100,
                                               smoothing);
        DeviceBuffers d({n, static_cast<size_t>(rows), n}, {targets.size()});
        kc::upload_ids(d.i[0], targets, V, -100, "test", "targets");
        up(d.f[0], logits), poison(d.f[1], rows), poison(d.f[2], n);
        kc::crossentropy_forward(d.f[1], d.f[0], d.i[0], rows, V, -100, smoothing);
        EXPECT_TRUE(near("losses", download(d.f[1], rows), losses, kFp32));
        kc::crossentropy_forward_backward(d.f[1], d.f[2], d.f[0], d.i[0], 0.25f, rows, V, -100, smoothing);
        EXPECT_TRUE(near("losses (with gradient)", download(d.f[1], rows), losses2, kFp32));
        EXPECT_TRUE(near("dlogits", download(d.f[2], n), dlogits, kFp32));
        kc::crossentropy_forward_backward(d.f[1], d.f[0], d.f[0], d.i[0], 0.25f, rows, V, -100, smoothing);
        EXPECT_TRUE(near("dlogits (in place over logits)", download(d.f[0], n), dlogits, kFp32));
      }
}

// The block-per-row kernel for V > 1024 (crossentropy.cu): one read for (max, sum of exp, sum of z) with float4
// loads after a 0-3 logit head up to 16-byte alignment, then the gradient. V = 4099 gives every row a different
// head; logits one float off shift them all; dlogits apart from logits with another alignment takes the scalar
// stores. Ignored rows (row 1 always), targets at the row's first and last logit, a huge logit in row 0,
// smoothing 0 and 0.1, dlogits aliasing logits, and a second run bit-equal to the first.
TEST(CudaOps, CrossEntropyLargeVocabularies) {
  QKV_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 650;
  for (float smoothing : {0.f, 0.1f})
    for (int V : {1025, 4099, 10000, 32768})
      for (int rows : {1, 5, 67}) {
        SCOPED_TRACE(::testing::Message() << "smoothing " << smoothing << " V " << V << " rows " << rows);
        const size_t n = static_cast<size_t>(rows) * V, nr = static_cast<size_t>(rows);
        auto logits = randn(n, seed++, 3.f);
        logits[0] += 1e4f;
        Rng rng(seed++);
        std::vector<int32_t> targets(nr);
        for (auto& t : targets) t = rng.uniform() < 0.2 ? -100 : static_cast<int32_t>(rng.next_u64() % V);
        if (rows > 1) targets[1] = -100;
        if (rows > 2) targets[2] = V - 1;  // the tail
        if (rows > 3) targets[3] = 0;      // the head
        std::vector<float> losses(nr), losses2(nr), dlogits(n);
        kernels::crossentropy_forward(losses, logits, targets.data(), rows, V, -100, smoothing);
        kernels::crossentropy_forward_backward(losses2, dlogits, logits, targets.data(), 0.25f, rows, V, -100,
                                               smoothing);
        DeviceBuffers d({n + 1, nr, n + 1, n + 1}, {nr});
        float *z_ = d.f[0], *l_ = d.f[1], *d_ = d.f[2], *zz_ = d.f[3];
        kc::upload_ids(d.i[0], targets, V, -100, "test", "targets");
        for (int off : {0, 1}) {  // logits (and the in-place dlogits) at 16-byte alignment, then one float off
          SCOPED_TRACE(off ? "logits one float off" : "logits aligned");
          float* z = z_ + off;
          up(z, logits), poison(l_, nr), poison(d_, n + 1);
          kc::crossentropy_forward(l_, z, d.i[0], rows, V, -100, smoothing);
          EXPECT_TRUE(near("losses", download(l_, nr), losses, kFp32));
          kc::crossentropy_forward_backward(l_, d_, z, d.i[0], 0.25f, rows, V, -100, smoothing);  // d_: aligned
          const auto l1 = download(l_, nr), d1 = download(d_, n);
          EXPECT_TRUE(near("losses (with gradient)", l1, losses2, kFp32));
          EXPECT_TRUE(near("dlogits", d1, dlogits, kFp32));
          kc::crossentropy_forward_backward(l_, d_, z, d.i[0], 0.25f, rows, V, -100, smoothing);
          EXPECT_EQ(download(l_, nr), l1) << "losses: a second run differs";
          EXPECT_EQ(download(d_, n), d1) << "dlogits: a second run differs";
          up(zz_ + off, logits);
          kc::crossentropy_forward_backward(l_, zz_ + off, zz_ + off, d.i[0], 0.25f, rows, V, -100, smoothing);
          EXPECT_TRUE(near("dlogits (in place over logits)", download(zz_ + off, n), dlogits, kFp32));
          EXPECT_EQ(download(l_, nr), l1) << "losses (in place)";
        }
      }
}

// ---- Adam(W), the gradient norm ----

TEST(CudaOps, AdamStepMatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  const size_t n = 70000;
  // Ranges with gaps (elements left alone) and different weight decays, cut across the kernel's blocks.
  const std::vector<kernels::AdamRange> ranges{{0, 1, 0.1f}, {3, 20000, 0.f}, {20000, 65537, 0.1f}, {66000, n, 0.01f}};
  for (bool decoupled : {true, false}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    auto p = randn(n, 700), m = randn(n, 701, 0.1f), v = randn(n, 702, 0.1f);
    for (auto& x : v) x = std::abs(x);
    DeviceBuffers d({n, n, n, n, sizeof(kernels::AdamRange) * ranges.size() / sizeof(float) + 1});
    auto* ranges_ = reinterpret_cast<kernels::AdamRange*>(d.f[4]);
    kc::upload_ranges(ranges_, ranges, "test");
    up(d.f[0], p), up(d.f[1], m), up(d.f[2], v);
    for (int t = 1; t <= 3; ++t) {
      const auto g = randn(n, 710 + t);
      const kernels::AdamHyper h{1e-3f * t, 0.9f, 0.98f, 1e-9f, decoupled, t, t == 2 ? 0.5f : 1.f};
      kernels::adam_step(p, m, v, g, ranges, h);
      up(d.f[3], g);
      kc::adam_step(d.f[0], d.f[1], d.f[2], d.f[3], ranges_, static_cast<int>(ranges.size()), n, h);
    }
    EXPECT_TRUE(near("p", download(d.f[0], n), p, kFp32));
    EXPECT_TRUE(near("m", download(d.f[1], n), m, kFp32));
    EXPECT_TRUE(near("v", download(d.f[2], n), v, kFp32));
  }
}

// The clipped step decides on the device (adamw.cuh): the sum of squares of every gradient, the clipping factor
// of that sum (ops/clip.h), the update with it, or no write at all when the sum, or the gate's (a step's losses),
// is not finite; nothing waits until clipped_adam_sums.
TEST(CudaOps, ClippedAdamStepDecidesOnTheDevice) {
  QKV_REQUIRE_CUDA_DEVICE();
  const size_t n = 70000;
  const std::vector<kernels::AdamRange> ranges{{0, 1, 0.1f}, {3, 20000, 0.f}, {20000, 65537, 0.1f}, {66000, n, 0.01f}};
  const size_t scratch_floats = 2 * kc::clipped_adam_scratch_size() + 2, rows = 777;
  for (float max_norm : {0.f, 1.f, 1e6f})
    for (int poisoned : {0, 1, 2}) {  // 1: a NaN gradient, 2: an infinite loss
      SCOPED_TRACE(::testing::Message() << "max_norm " << max_norm << " poisoned " << poisoned);
      auto p = randn(n, 720), m = randn(n, 721, 0.1f), v = randn(n, 722, 0.1f), g = randn(n, 723, 2.f);
      auto losses = randn(rows, 724);
      for (auto& x : v) x = std::abs(x);
      if (poisoned == 1) g[n / 3] = std::nanf("");
      if (poisoned == 2) losses[rows / 2] = std::numeric_limits<float>::infinity();
      DeviceBuffers d(
          {n, n, n, n, sizeof(kernels::AdamRange) * ranges.size() / sizeof(float) + 2, scratch_floats, rows});
      auto* ranges_ = reinterpret_cast<kernels::AdamRange*>(d.f[4]);
      kc::upload_ranges(ranges_, ranges, "test");
      up(d.f[0], p), up(d.f[1], m), up(d.f[2], v), up(d.f[3], g), up(d.f[6], losses);
      const kernels::AdamHyper h{1e-3f, 0.9f, 0.99f, 1e-8f, true, 2, 1.f};
      kc::clipped_adam_step(d.f[0], d.f[1], d.f[2], d.f[3], d.f[3], n, d.f[6], rows, ranges_,
                            static_cast<int>(ranges.size()), n, ops::AdamPlan::of(h), max_norm,
                            reinterpret_cast<double*>(d.f[5]));
      const auto sums = kc::clipped_adam_sums(reinterpret_cast<double*>(d.f[5]));
      const double s = sums[0];
      double gate = 0;
      for (float x : losses) gate += static_cast<double>(x) * x;
      if (poisoned == 2) {
        EXPECT_TRUE(std::isinf(sums[1]));
      } else {
        EXPECT_NEAR(sums[1], gate, 1e-12 * gate);
      }
      if (poisoned) {
        EXPECT_EQ(std::isnan(s), poisoned == 1);
        EXPECT_EQ(download(d.f[0], n), p);
        EXPECT_EQ(download(d.f[1], n), m);
        EXPECT_EQ(download(d.f[2], n), v);
        continue;
      }
      double want = 0;
      for (float x : g) want += static_cast<double>(x) * x;
      EXPECT_NEAR(s, want, 1e-12 * want);
      kernels::AdamHyper clipped = h;
      clipped.grad_scale = ops::clip_factor(s, max_norm);
      if (max_norm == 1.f) {
        EXPECT_LT(clipped.grad_scale, 0.01f);
      }
      kernels::adam_step(p, m, v, g, ranges, clipped);
      EXPECT_TRUE(near("p", download(d.f[0], n), p, kFp32));
      EXPECT_TRUE(near("m", download(d.f[1], n), m, kFp32));
      EXPECT_TRUE(near("v", download(d.f[2], n), v, kFp32));
    }
}

TEST(CudaOps, SumSquaresMatchesTheCpu) {
  QKV_REQUIRE_CUDA_DEVICE();
  for (size_t n : {1, 17, 257, 100003, 3000000}) {
    const auto x = randn(n, 800 + n);
    DeviceBuffers d({n, 2 * kc::sum_squares_scratch_size()});
    up(d.f[0], x);
    const double got = kc::sum_squares(d.f[0], n, reinterpret_cast<double*>(d.f[1]));
    double want = 0;  // in double throughout, as the CUDA kernel sums (the CPU's SIMD op sums blocks in float)
    for (float v : x) want += static_cast<double>(v) * v;
    EXPECT_NEAR(got, want, 1e-12 * want) << "n " << n;
    EXPECT_NEAR(got, kernels::sum_squares(x), 1e-5 * want) << "against the CPU op, n " << n;
    EXPECT_EQ(got, kc::sum_squares(d.f[0], n, reinterpret_cast<double*>(d.f[1]))) << "deterministic, n " << n;
  }
}

// ---- errors on the GPU path ----

TEST(CudaOps, AnInjectedCudaErrorBecomesAnErrorNamingTheOp) {
  QKV_REQUIRE_CUDA_DEVICE();
  // An allocation no GPU can satisfy: cudaMalloc fails (not sticky), and the arena says so.
  kc::DeviceArena huge;
  const std::string m = test::message_of([&] { huge.plan([](kc::DeviceArena& a) { a.take_bytes(size_t{1} << 52); }); });
  EXPECT_NE(m.find("DeviceArena::plan (cuda): cudaMalloc of 4503599627370496 bytes failed: cudaErrorMemoryAllocation"),
            std::string::npos)
      << m;
  // The device is still usable afterwards.
  DeviceBuffers d({4, 4});
  up(d.f[0], {1.f, 2.f, 3.f, 4.f});
  kc::dropout_forward(d.f[1], d.f[0], 4, 0.f, 1);
  EXPECT_EQ(download(d.f[1], 4), (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
}

TEST(CudaOps, BadIdsAreRefusedBeforeTheGpuSeesThem) {
  QKV_REQUIRE_CUDA_DEVICE();
  DeviceBuffers d({}, {4});
  kc::upload_ids(d.i[0], std::vector<int32_t>{0, 1, 2, 3}, 4, std::nullopt, "test", "tokens");
  const std::string m = test::message_of([&] {
    kc::upload_ids(d.i[0], std::vector<int32_t>{0, 1, 9, 3}, 4, std::nullopt, "embedding_forward", "tokens");
  });
  EXPECT_NE(m.find("tokens[2] = 9 is out of range"), std::string::npos) << m;
}

}  // namespace
}  // namespace qkv::cuda_backend_ops_test
