// gemm against a double-precision reference, over ragged shapes around the vector widths (4, 8, 16) and
// the 4-row micro-kernel, every transposition the layers use, alpha/beta, padded leading dimensions,
// every instruction set this machine has (forced) and 1 or 2 threads.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv {
namespace {

struct Case {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
};

// Checks C against sum_k op(A)op(B) in double with the classic bound |err| <= gamma_K * sum|a||b|.
void check_case(const Case& c, const std::string& isa) {
  const int lda = (c.ta ? c.M : c.K) + 3, ldb = (c.tb ? c.K : c.N) + 2, ldc = c.N + 1;
  const int arows = c.ta ? c.K : c.M, brows = c.tb ? c.N : c.K;
  auto A = test::randn(static_cast<size_t>(arows) * lda, 1 + c.M);
  auto B = test::randn(static_cast<size_t>(brows) * ldb, 2 + c.N);
  auto C = test::randn(static_cast<size_t>(c.M) * ldc, 3 + c.K);
  const auto C0 = C;
  kernels::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < c.N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < c.K; ++k) {
        const double a = c.ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        const double b = c.tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        ref += a * b;
        mag += std::abs(a * b);
      }
      const double c0 = C0[static_cast<size_t>(i) * ldc + j];
      ref = c.alpha * ref + c.beta * c0;
      mag = std::abs(c.alpha) * mag + std::abs(c.beta * c0);
      const double tol = 2.0 * (c.K + 2) * 1.2e-7 * mag + 1e-30;
      const double got = C[static_cast<size_t>(i) * ldc + j];
      ASSERT_LE(std::abs(got - ref), tol)
          << "isa=" << isa << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N << " K=" << c.K
          << " at (" << i << "," << j << ") got " << got << " expected " << ref;
    }
    // Padding columns of C must be untouched.
    ASSERT_EQ(C[static_cast<size_t>(i) * ldc + c.N], C0[static_cast<size_t>(i) * ldc + c.N]);
  }
}

TEST(Gemm, MatchesDoubleReferenceOverRaggedShapes) {
  const int sizes[] = {1, 3, 4, 5, 8, 15, 16, 17, 33, 67};
  const bool trans[][2] = {{false, false}, {true, false}, {false, true}};
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (const auto& t : trans)
        for (int M : sizes)
          for (int N : sizes)
            for (int K : {1, 7, 16, 31, 64}) check_case({t[0], t[1], M, N, K, 1.f, 0.f}, isa);
    });
  }
}

TEST(Gemm, AlphaBetaAndLargeThreadedShapes) {
  set_num_threads(std::min(2, max_threads()));
  test::for_each_isa([&](const std::string& isa) {
    check_case({false, false, 130, 257, 129, 0.5f, 1.f}, isa);
    check_case({true, false, 129, 130, 257, -1.f, 0.25f}, isa);
    check_case({false, true, 257, 129, 130, 2.f, 1.f}, isa);
  });
}

TEST(Gemm, ReferenceMatchesToo) {
  auto A = test::randn(6 * 5, 7), B = test::randn(5 * 4, 8);
  std::vector<float> C(6 * 4), R(6 * 4);
  kernels::gemm_reference(false, false, 6, 4, 5, 1.f, A.data(), 5, B.data(), 4, 0.f, R.data(), 4);
  kernels::gemm(false, false, 6, 4, 5, 1.f, A.data(), 5, B.data(), 4, 0.f, C.data(), 4);
  for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], R[i], 1e-5f);
}

TEST(Gemm, RejectsDoubleTranspose) {
  float x = 0;
  EXPECT_THROW(kernels::gemm(true, true, 1, 1, 1, 1.f, &x, 1, &x, 1, 0.f, &x, 1), Error);
}

TEST(Gemm, ForceIsaRejectsUnknownName) {
  EXPECT_THROW(force_isa("avx9000"), Error);
  EXPECT_EQ(available_isas().back(), "scalar");
}

}  // namespace
}  // namespace qkv
