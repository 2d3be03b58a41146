// gemm against a double-precision reference, over ragged shapes around the register tiles (MR 4/6/8 rows,
// NR 4/8/16/32/64 columns), the tiles of C and the K blocks (256), all four transpositions, alpha/beta,
// padded leading dimensions, every instruction set this machine has (forced) and 1..max threads.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernels/kernels.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"
#include "test_util.h"

namespace qkv::gemm_test {
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

const bool kTrans[][2] = {{false, false}, {true, false}, {false, true}, {true, true}};

// The widest op(B) the thin kernel takes (kernels/cpu/gemm.cpp: kThinMaxN).
constexpr int kThinColumns = 16;

TEST(Gemm, MatchesDoubleReferenceOverRaggedShapes) {
  const int sizes[] = {1, 3, 4, 5, 8, 13, 17, 33, 64, 67};
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (const auto& t : kTrans)
        for (int M : sizes)
          for (int N : sizes)
            for (int K : {1, 7, 16, 31, 64}) check_case({t[0], t[1], M, N, K, 1.f, 0.f}, isa);
    });
  }
}

// A transposed B packed in panels of 64 rows goes through the SIMD transposing copy (gemm_simd.h:
// gemm_pack_transposed, four rows and four k at a time): every count of rows left past the last four in the ragged
// last panel, K with 0-3 left past the last four, inside one K block and across it, with alpha and beta.
TEST(Gemm, TransposedBPacksInBlocksOfFourOverRaggedPanels) {
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (int N : {384, 385, 386, 387, 389, 446})  // wide enough for the 64-column tile (gemm.cpp: select)
        for (int K : {3, 4, 5, 9, 255, 257, 300}) check_case({false, true, 70, N, K, 0.5f, 1.f}, isa);
    });
  }
}

// Shapes that cross the K block (256), several tiles of C (192 rows, 512 columns) and ragged edges of
// both, with alpha/beta, at every thread count up to the machine's.
TEST(Gemm, AlphaBetaAndLargeThreadedShapes) {
  for (int threads = 1; threads <= std::min(4, max_threads()); ++threads) {
    set_num_threads(threads);
    test::for_each_isa([&](const std::string& isa) {
      check_case({false, false, 130, 257, 129, 0.5f, 1.f}, isa);
      check_case({true, false, 129, 130, 257, -1.f, 0.25f}, isa);
      check_case({false, true, 257, 129, 130, 2.f, 1.f}, isa);
      check_case({true, true, 67, 257, 67, 1.f, -0.5f}, isa);
      check_case({false, false, 400, 531, 600, 1.f, 0.f}, isa);
      check_case({false, true, 3, 1000, 517, 1.f, 1.f}, isa);
      // A transposed A with N > 512 is packed whole, every panel (not only a ragged last one).
      check_case({true, false, 531, 40, 520, 1.f, 0.5f}, isa);
      // One or two rows: the row kernels, threaded over column chunks, with a ragged last chunk.
      check_case({false, true, 1, 1000, 517, 1.f, 1.f}, isa);
      check_case({true, false, 2, 1003, 300, 0.5f, -0.5f}, isa);
      check_case({true, true, 1, 999, 301, -1.f, 0.f}, isa);
      check_case({false, false, 2, 1025, 260, 1.f, 0.f}, isa);
    });
  }
  set_num_threads(max_threads());
}

// op(A), where gemm packs it, is packed a block of row panels at a time (at most gemm_packed_a_floats()), each block
// swept over all of op(B); an op(B) packed whole is cut into blocks of columns (gemm_packed_b_floats()). With the
// bounds cut to a few panels, these shapes cross several blocks, ragged last ones included, in all four
// transpositions: C meets the reference's bound and equals, bit for bit, the product packed in one block (each
// element the same sum: only the tiles change).
TEST(Gemm, PackedRowAndColumnBlocksGiveTheSameProduct) {
  const Case cases[] = {{false, false, 130, 531, 129, 0.5f, 1.f},
                        {true, false, 531, 40, 257, 1.f, 0.5f},
                        {false, true, 257, 600, 130, 2.f, 0.f},
                        {true, true, 67, 515, 67, 1.f, -0.5f}};
  auto product = [](const Case& c) {
    const int lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
    const auto A = test::randn(static_cast<size_t>(c.ta ? c.K : c.M) * lda, 5);
    const auto B = test::randn(static_cast<size_t>(c.tb ? c.N : c.K) * ldb, 6);
    auto C = test::randn(static_cast<size_t>(c.M) * c.N, 7);
    kernels::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), c.N);
    return C;
  };
  const int64_t whole = kernels::gemm_packed_a_floats(), whole_b = kernels::gemm_packed_b_floats();
  for (int threads = 1; threads <= std::min(2, max_threads()); ++threads) {
    set_num_threads(threads);
    test::for_each_isa([&](const std::string& isa) {
      for (const Case& c : cases) {
        const std::vector<float> one_block = product(c);
        kernels::set_gemm_packed_a_floats(3000);  // 1 to 3 panels of MR rows a block at these K
        const std::vector<float> blocks = product(c);
        check_case(c, isa);
        kernels::set_gemm_packed_a_floats(whole);
        ASSERT_EQ(one_block, blocks) << "isa=" << isa << " M=" << c.M << " N=" << c.N << " K=" << c.K;
        // And op(B) in blocks of 64 columns (its bound cut below one panel's worth), with A's blocks too.
        kernels::set_gemm_packed_b_floats(1000);
        const std::vector<float> b_blocks = product(c);
        kernels::set_gemm_packed_a_floats(3000);
        const std::vector<float> both = product(c);
        check_case(c, isa);
        kernels::set_gemm_packed_a_floats(whole);
        kernels::set_gemm_packed_b_floats(whole_b);
        ASSERT_EQ(one_block, b_blocks) << "isa=" << isa << " M=" << c.M << " N=" << c.N << " K=" << c.K;
        ASSERT_EQ(one_block, both) << "isa=" << isa << " M=" << c.M << " N=" << c.N << " K=" << c.K;
      }
    });
  }
  set_num_threads(max_threads());
  EXPECT_NE(test::message_of([] { kernels::set_gemm_packed_a_floats(0); }).find("floats must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(test::message_of([] { kernels::set_gemm_packed_b_floats(-1); }).find("floats must be >= 1, got -1"),
            std::string::npos);
}

// The row kernel behind batch-1 decoding (M = 1, B transposed: y = x W^T) takes B's rows one at a time, k four
// vectors a step, then one, then element by element: at every instruction set and K around those steps (W = 4, 8,
// 16 lanes: K = 4W - 1, 4W, 4W + 1, 5W + 3, ...) and any N, each element matches the double reference, and equals
// bit for bit the same row computed alone (N = 1): where a row falls in B never changes its sum's order.
TEST(Gemm, RowKernelMatchesReferenceAndEveryRowAlone) {
  set_num_threads(1);
  test::for_each_isa([&](const std::string& isa) {
    for (const int K : {3, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 35, 43, 51, 63, 64, 65, 83, 99, 127, 129, 768})
      for (const int N : {1, 4, 7, 8, 12, 13, 15, 23, 29, 64 + 15}) {
        check_case({false, true, 1, N, K, 1.f, 0.f}, isa);
        check_case({false, true, 1, N, K, 0.5f, -1.f}, isa);
        const int ldb = K + 5;
        auto a = test::randn(static_cast<size_t>(K), 11 + K), B = test::randn(static_cast<size_t>(N) * ldb, 12 + N);
        std::vector<float> all(static_cast<size_t>(N)), one(1);
        kernels::gemm(false, true, 1, N, K, 1.f, a.data(), K, B.data(), ldb, 0.f, all.data(), N);
        for (int j = 0; j < N; ++j) {
          kernels::gemm(false, true, 1, 1, K, 1.f, a.data(), K, B.data() + static_cast<size_t>(j) * ldb, ldb, 0.f,
                        one.data(), 1);
          ASSERT_EQ(all[static_cast<size_t>(j)], one[0]) << isa << " N " << N << " K " << K << " row " << j;
        }
      }
  });
  set_num_threads(max_threads());
}

// A few rows of A times a large transposed B (a weight times a prompt's or a head chunk's rows) is computed as
// C^T = B A^T (kernels/cpu/gemm.cpp: gemm_swapped, B of at least 2^18 floats, K >= 256): every element equals, bit for
// bit, the one the other orientation gives (a call with N <= M, which takes the direct product), with alpha and beta, K
// across the K block (256) and ragged against every tile, on every instruction set; and meets the double reference.
// The other orientation of a product of at most 16 rows has a thin B, which the thin kernel takes (its sums in another
// order): those shapes are checked against the double reference, and the swapped product against the direct one
// through the rows' independence of M (ThinBIsTheSameSumWhateverTheRows below covers the thin kernel's).
TEST(Gemm, FewRowsTimesALargeTransposedBIsTheTransposedProductBitForBit) {
  struct Shape {
    int M, N, K;
  };
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (const Shape& sh :
           {Shape{3, 1100, 300}, Shape{7, 2000, 260}, Shape{17, 1100, 300}, Shape{64, 1100, 257}, Shape{65, 1025, 256},
            Shape{200, 1100, 300}, Shape{5, 300, 17}, Shape{9, 3000, 140}, Shape{19, 3000, 140}})
        for (const auto& [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, -1.f}}) {
          const int M = sh.M, N = sh.N, K = sh.K, lda = K + 3, ldb = K + 1, ldc = N + 2;
          const auto A = test::randn(static_cast<size_t>(M) * lda, 70 + static_cast<uint64_t>(M));
          const auto B = test::randn(static_cast<size_t>(N) * ldb, 71 + static_cast<uint64_t>(N));
          const auto C0 = test::randn(static_cast<size_t>(M) * ldc, 72);
          auto C = C0;
          std::vector<float> T(static_cast<size_t>(N) * M);  // C0^T, then alpha B A^T + beta C0^T
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) T[static_cast<size_t>(j) * M + i] = C0[static_cast<size_t>(i) * ldc + j];
          kernels::gemm(false, true, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
          if (M <= kThinColumns) {
            check_case({false, true, M, N, K, alpha, beta}, isa);
            continue;
          }
          kernels::gemm(false, true, N, M, K, alpha, B.data(), ldb, A.data(), lda, beta, T.data(), M);
          for (int i = 0; i < M; ++i) {
            for (int j = 0; j < N; ++j)
              ASSERT_EQ(C[static_cast<size_t>(i) * ldc + j], T[static_cast<size_t>(j) * M + i])
                  << isa << " M " << M << " N " << N << " K " << K << " alpha " << alpha << " at (" << i << "," << j
                  << ")";
            ASSERT_EQ(C[static_cast<size_t>(i) * ldc + N], C0[static_cast<size_t>(i) * ldc + N]);  // padding
          }
        }
      check_case({false, true, 32, 1100, 300, 0.5f, -1.f}, isa);
      check_case({false, true, 65, 2100, 130, 1.f, 0.f}, isa);
    });
  }
  set_num_threads(max_threads());
}

// A row-major A against a thin op(B) (N <= 16 columns: LoRA's t = x A^T and dt = dy B at rank r) goes through the thin
// kernel (gemm_kernel.h), R x NC elements a block: against the double reference over ragged rows (around R = 2 and 3),
// every N to 16 (around NC = 4 and 8), K around the vector widths and the minimum of 32, both forms of op(B), with
// alpha and beta, on every instruction set and thread count.
TEST(Gemm, ThinBMatchesDoubleReference) {
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (const bool tb : {false, true})
        for (int M : {3, 4, 5, 7, 50, 97})
          for (int N = 1; N <= kThinColumns; ++N)
            for (int K : {32, 33, 47, 64, 100})
              check_case({false, tb, M, N, K, M % 2 ? 1.f : 0.5f, M % 2 ? 0.f : -1.f}, isa);
      check_case({false, true, 1024, 8, 768, 1.f, 0.f}, isa);    // GPT-2's LoRA t = x A^T at rank 8
      check_case({false, false, 1024, 8, 3072, 2.f, 0.f}, isa);  // dt = s dy B
    });
  }
  set_num_threads(max_threads());
}

// Each element of a thin product is the same sum, bit for bit, whatever the rows of the call (from 3, past the row
// kernels: a head chunk's or a prompt's rows split differently), whatever its columns (a column alone against all N),
// and whatever the threads.
TEST(Gemm, ThinBIsTheSameSumWhateverTheRows) {
  test::for_each_isa([&](const std::string& isa) {
    for (const bool tb : {false, true})
      for (const int N : {3, 8, 13}) {
        const int M = 101, K = 300, lda = K + 1, ldb = tb ? K + 2 : N + 2, ldc = N + 3;
        const auto A = test::randn(static_cast<size_t>(M) * lda, 80);
        const auto B = test::randn(static_cast<size_t>(tb ? N : K) * ldb, 81);
        set_num_threads(max_threads());
        std::vector<float> all(static_cast<size_t>(M) * ldc, 0.f);
        kernels::gemm(false, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.f, all.data(), ldc);
        set_num_threads(1);
        for (const int rows : {3, 4, 5, 49}) {
          std::vector<float> part(static_cast<size_t>(rows) * ldc, 0.f);
          for (int i0 = 0; i0 + rows <= M; i0 += rows + 1) {
            kernels::gemm(false, tb, rows, N, K, 0.5f, A.data() + static_cast<size_t>(i0) * lda, lda, B.data(), ldb,
                          0.f, part.data(), ldc);
            for (int i = 0; i < rows; ++i)
              for (int j = 0; j < N; ++j)
                ASSERT_EQ(part[static_cast<size_t>(i) * ldc + j], all[static_cast<size_t>(i0 + i) * ldc + j])
                    << isa << " tb " << tb << " N " << N << " rows " << rows << " at (" << i0 + i << "," << j << ")";
          }
        }
        for (int j = 0; j < N; ++j) {  // column j alone: op(B) cut to it
          std::vector<float> one(static_cast<size_t>(M), 0.f);
          const float* bj = tb ? B.data() + static_cast<size_t>(j) * ldb : B.data() + j;
          kernels::gemm(false, tb, M, 1, K, 0.5f, A.data(), lda, bj, ldb, 0.f, one.data(), 1);
          for (int i = 0; i < M; ++i)
            ASSERT_EQ(one[static_cast<size_t>(i)], all[static_cast<size_t>(i) * ldc + j])
                << isa << " tb " << tb << " N " << N << " column " << j << " row " << i;
        }
      }
  });
  set_num_threads(max_threads());
}

// A transposed A against a thin B (LoRA's dB = dy^T t: (out, r) from 1024 rows) is computed as C^T = B^T A
// (gemm_swapped): every element equals, bit for bit, the other orientation's (few rows of a transposed A, the direct
// product), with alpha and beta and K across the K block; and meets the double reference.
TEST(Gemm, TransposedATimesThinBIsTheTransposedProductBitForBit) {
  for (int threads : {1, 2}) {
    set_num_threads(std::min(threads, max_threads()));
    test::for_each_isa([&](const std::string& isa) {
      for (const int N : {3, 8, 16})
        for (const int M : {65, 300, 768})
          for (const auto& [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{2.f, 1.f}}) {
            const int K = 300, lda = M + 3, ldb = N + 1, ldc = N + 2;
            const auto A = test::randn(static_cast<size_t>(K) * lda, 90);  // op(A) = A^T, A (K, M)
            const auto B = test::randn(static_cast<size_t>(K) * ldb, 91);  // op(B) = B (K, N)
            const auto C0 = test::randn(static_cast<size_t>(M) * ldc, 92);
            auto C = C0;
            std::vector<float> T(static_cast<size_t>(N) * M);
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < N; ++j) T[static_cast<size_t>(j) * M + i] = C0[static_cast<size_t>(i) * ldc + j];
            kernels::gemm(true, false, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
            kernels::gemm(true, false, N, M, K, alpha, B.data(), ldb, A.data(), lda, beta, T.data(), M);
            for (int i = 0; i < M; ++i) {
              for (int j = 0; j < N; ++j)
                ASSERT_EQ(C[static_cast<size_t>(i) * ldc + j], T[static_cast<size_t>(j) * M + i])
                    << isa << " M " << M << " N " << N << " alpha " << alpha << " at (" << i << "," << j << ")";
              ASSERT_EQ(C[static_cast<size_t>(i) * ldc + N], C0[static_cast<size_t>(i) * ldc + N]);  // padding
            }
            check_case({true, false, M, N, K, alpha, beta}, isa);
          }
    });
  }
  set_num_threads(max_threads());
}

// beta == 0 must not read C: NaN there must not leak into the result (BLAS semantics).
TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  test::for_each_isa([&](const std::string& isa) {
    for (const auto& t : kTrans)
      for (const auto& [M, N, K] : {std::tuple{17, 35, 9}, std::tuple{1, 35, 9}, std::tuple{100, 8, 40}}) {
        // packed; the row kernels; thin (N <= 16: the thin kernel, or swapped with a transposed A)
        auto A = test::randn(static_cast<size_t>(M) * K, 1), B = test::randn(static_cast<size_t>(K) * N, 2);
        std::vector<float> C(static_cast<size_t>(M) * N, std::nanf("")), R(C.size());
        kernels::gemm(t[0], t[1], M, N, K, 1.f, A.data(), t[0] ? M : K, B.data(), t[1] ? K : N, 0.f, C.data(), N);
        kernels::gemm_reference(t[0], t[1], M, N, K, 1.f, A.data(), t[0] ? M : K, B.data(), t[1] ? K : N, 0.f, R.data(),
                                N);
        for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 1e-5f) << isa << " M " << M << " at " << i;
      }
  });
}

// K == 0 leaves beta * C; M or N == 0 touch nothing.
TEST(Gemm, EmptyProducts) {
  std::vector<float> C = {1.f, 2.f, 3.f, 4.f};
  const float x = 1.f;
  kernels::gemm(false, false, 2, 2, 0, 1.f, &x, 1, &x, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  kernels::gemm(false, false, 0, 2, 3, 1.f, &x, 3, &x, 2, 0.f, C.data(), 2);
  kernels::gemm(false, false, 2, 0, 3, 1.f, &x, 3, &x, 2, 0.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  kernels::gemm(false, false, 2, 2, 0, 1.f, &x, 1, &x, 2, 0.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>(4, 0.f)));
  EXPECT_THROW(kernels::gemm(false, false, -1, 2, 2, 1.f, &x, 1, &x, 2, 0.f, C.data(), 2), Error);
}

// Products called from inside a parallel region (as attention does per head) run inline and stay exact.
TEST(Gemm, NestedInsideParallelRegion) {
  set_num_threads(max_threads());
  const int M = 67, N = 45, K = 33, tasks = 6;
  auto A = test::randn(static_cast<size_t>(tasks) * M * K, 5), B = test::randn(static_cast<size_t>(K) * N, 6);
  std::vector<float> C(static_cast<size_t>(tasks) * M * N), R(C.size());
  parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      kernels::gemm(false, true, M, N, K, 1.f, A.data() + t * M * K, K, B.data(), K, 0.f, C.data() + t * M * N, N);
  });
  for (int t = 0; t < tasks; ++t)
    kernels::gemm_reference(false, true, M, N, K, 1.f, A.data() + t * M * K, K, B.data(), K, 0.f, R.data() + t * M * N,
                            N);
  for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 2e-5f * (1 + std::abs(R[i]))) << i;
}

TEST(Gemm, ReferenceMatchesToo) {
  auto A = test::randn(6 * 5, 7), B = test::randn(5 * 4, 8);
  std::vector<float> C(6 * 4), R(6 * 4);
  kernels::gemm_reference(false, false, 6, 4, 5, 1.f, A.data(), 5, B.data(), 4, 0.f, R.data(), 4);
  kernels::gemm(false, false, 6, 4, 5, 1.f, A.data(), 5, B.data(), 4, 0.f, C.data(), 4);
  for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], R[i], 1e-5f);
}

TEST(Gemm, ForceIsaRejectsUnknownName) {
  EXPECT_THROW(force_isa("avx9000"), Error);
  EXPECT_EQ(available_isas().back(), "scalar");
}

}  // namespace
}  // namespace qkv::gemm_test
