// Matrix product, the BLIS / GotoBLAS scheme:
//   1. pack op(A) into panels of MR rows (k-major: column k of the MR rows is MR contiguous floats, zero
//      rows past M), and op(B) into panels of NR columns (row k of the panel is NR contiguous floats, zero
//      columns past N). Packing absorbs every transposition, so one micro-kernel serves all four variants.
//   2. C is cut into tiles of MC x NC; threads take whole tiles (no two write the same C element). Inside a
//      tile, K is cut into blocks of KC: for each block, each A panel (MR x KC, kept in L1) sweeps every B
//      panel of the tile (KC x NC, kept in L2), and the MR x NR register tile of C is updated once per block.
//      This is BLIS's order for a kernel that broadcasts A and loads vectors of B: per k step it reads MR
//      floats of A (from L1) and NV vectors of B, which L2 delivers in time (256 bytes per 24 FMAs with
//      AVX-512's 6 x 4-vector tile). The other order (a B panel in L1 swept by the A panels) measured 3%
//      slower at 1024^3 with the 8 x 2-vector tile (1 thread, CPU time, alternated in one process), and the
//      same on the char GPT's step with either tile, as did K blocks of 64 and 128.
// A row-major op(B) (no trans_b) is read in place when there are too few rows of A to repay packing it, or its rows
// are short (N <= 512, see gemm());
// its last panel is packed anyway when N is not a multiple of NR, so the micro-kernel never reads past N.
// Products with one or two rows of op(A) (generation's one token per step) skip packing: row kernels
// (gemm_kernel.h) take dot products with the rows of a transposed B, or sum rows of B, in place. Products whose
// op(B) has at most 16 columns (a LoRA adapter's rank) take the thin kernel, which reads a row-major A in place
// (gemm_thin), or with a transposed A the swapped product (gemm_swapped).
// A row-major op(A) is read in place (gemm_tiled), a transposed one while its rows are short.
// Packed panels live in a per-thread buffer that grows to the largest product seen (at most 4 MiB of op(A)'s row
// panels and 4 MiB of op(B)'s columns at a time: gemm()) and is then reused: a training loop with fixed shapes
// allocates nothing after its first step.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm_kernel.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/transpose.h"
#include "kernels/kernels.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"
#include "runtime/parallel_runs.h"

namespace qkv::kernels {

// Packing's transposing copy (its contract is in transpose.h): R rows of a row-major matrix become one k-major
// panel (a row-major op(A), a transposed op(B), attention's key and value blocks). k runs outside: each k step writes R
// contiguous floats and reads one float from each row, whose cache lines stay in L1 for the next 15 steps. With R fixed
// at compile time the R row pointers live in registers and the step is unrolled. Measured against the earlier
// row-at-a-time scatter (write every R-th float, R passes over the panel), 1 thread, CPU time, alternated in one
// process: 1024^3 +3-6%, the char GPT's linear forwards (A*Bt, the weight packed as op(B)) +4-14%.
namespace {
template <int R>
void pack_transposed_full(float* dst, const float* src, int ld, int K) {
  const float* row[R];
  for (int r = 0; r < R; ++r) row[r] = src + static_cast<size_t>(r) * ld;
  for (int k = 0; k < K; ++k, dst += R) {
#pragma GCC unroll 64
    for (int r = 0; r < R; ++r) dst[r] = row[r][k];
  }
}

}  // namespace

void pack_transposed(float* dst, int R, const float* src, int ld, int rows, int K) {
  if (rows == R) {
    switch (R) {  // every MR and NR of the micro-kernels (gemm_simd.h, the scalar tile); attention's 16-64
      case 4: return pack_transposed_full<4>(dst, src, ld, K);
      case 6: return pack_transposed_full<6>(dst, src, ld, K);
      case 8: return pack_transposed_full<8>(dst, src, ld, K);
      case 16: return pack_transposed_full<16>(dst, src, ld, K);
      case 32: return pack_transposed_full<32>(dst, src, ld, K);
      case 64: return pack_transposed_full<64>(dst, src, ld, K);
      default: break;
    }
  }
  // The ragged last panel (and any other R): row at a time, then zeros past rows (whose row pointers would
  // point past src).
  for (int r = 0; r < rows; ++r) {
    const float* s = src + static_cast<size_t>(r) * ld;
    for (int k = 0; k < K; ++k) dst[static_cast<size_t>(k) * R + r] = s[k];
  }
  for (int k = 0; k < K; ++k)
    std::fill(dst + static_cast<size_t>(k) * R + rows, dst + static_cast<size_t>(k) * R + R, 0.f);
}

namespace {

constexpr int kKC = 256;  // K block: an MR x KC panel of A is 6 KB at MR = 6, a KC x NR panel of B 64 KB at NR = 64
constexpr int kMC = 192;  // rows per tile (rounded down to a multiple of MR)
constexpr int kNC = 512;  // columns per tile (a multiple of every NR): KC x NC of B is 512 KB of L2
constexpr int64_t kPackedAFloats = int64_t{1} << 20;  // packed op(A) per block of row panels: 4 MiB (gemm())
std::atomic<int64_t> packed_a_limit{kPackedAFloats};
constexpr int64_t kPackedBFloats = int64_t{1} << 20;  // packed op(B) per block of columns: 4 MiB (gemm())
std::atomic<int64_t> packed_b_limit{kPackedBFloats};

// The scalar fallback's register tile, and the micro-kernel's contract (gemm_kernel.h) in plain loops.
constexpr int kScalarMR = 4, kScalarNR = 4;

void gemm_micro_scalar(int kc, const float* a, int rs_a, int cs_a, const float* b, int ldb, float* c, int ldc,
                       float alpha, float beta) {
  float acc[kScalarMR][kScalarNR] = {};
  for (int k = 0; k < kc; ++k, a += cs_a, b += ldb)
    for (int r = 0; r < kScalarMR; ++r)
      for (int j = 0; j < kScalarNR; ++j) acc[r][j] += a[r * rs_a] * b[j];
  for (int r = 0; r < kScalarMR; ++r) {
    float* cr = c + static_cast<size_t>(r) * ldc;
    for (int j = 0; j < kScalarNR; ++j) cr[j] = alpha * acc[r][j] + (beta == 0.f ? 0.f : beta * cr[j]);
  }
}

// Packing's copy (gemm_kernel.h) in plain loops.
void gemm_pack_rows_scalar(float* dst, int width, const float* src, int ld, int rows, int cols) {
  for (int k = 0; k < rows; ++k, dst += width, src += static_cast<ptrdiff_t>(ld)) {
    for (int j = 0; j < cols; ++j) dst[j] = src[j];
    for (int j = cols; j < width; ++j) dst[j] = 0.f;
  }
}

// The row kernels' contract in plain loops.
void gemm_row_dot_scalar(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  for (int n = 0; n < N; ++n) {
    const float* bn = B + static_cast<size_t>(n) * ldb;
    float s = 0.f;
    for (int k = 0; k < K; ++k) s += a[k] * bn[k];
    c[n] = beta == 0.f ? alpha * s : alpha * s + beta * c[n];
  }
}

void gemm_row_axpy_scalar(int N, int K, float alpha, const float* a, const float* B, int ldb, float beta, float* c) {
  for (int n = 0; n < N; ++n) {
    float s = 0.f;
    for (int k = 0; k < K; ++k) s += a[k] * B[static_cast<size_t>(k) * ldb + n];
    c[n] = beta == 0.f ? alpha * s : alpha * s + beta * c[n];
  }
}

void gemm_row_thin_scalar(int rows, int N, int K, float alpha, const float* A, int lda, const float* Bt, int ldbt,
                          float beta, float* C, int ldc) {
  for (int i = 0; i < rows; ++i)
    gemm_row_dot_scalar(N, K, alpha, A + static_cast<size_t>(i) * lda, Bt, ldbt, beta,
                        C + static_cast<size_t>(i) * ldc);
}

GemmRowKernels select_rows() {
  switch (active_isa()) {
#if QKV_ISA_AVX512
    case Isa::AVX512: return gemm_row_kernels<xsimd::avx512f>();
#endif
#if QKV_ISA_AVX2
    case Isa::AVX2: return gemm_row_kernels<xsimd::fma3<xsimd::avx2>>();
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return gemm_row_kernels<xsimd::sse4_1>();
#endif
#if QKV_ISA_NEON
    case Isa::NEON: return gemm_row_kernels<xsimd::neon64>();
#endif
    default: return {&gemm_row_dot_scalar, &gemm_row_axpy_scalar, &gemm_row_thin_scalar};
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The selection table, best instruction set first and scalar last; narrow asks for the set's narrow tile.
GemmMicroKernel select_tile([[maybe_unused]] bool narrow) {
  switch (active_isa()) {
#if QKV_ISA_AVX512
    case Isa::AVX512: return gemm_micro_kernel<xsimd::avx512f>(narrow);
#endif
#if QKV_ISA_AVX2
    case Isa::AVX2: return gemm_micro_kernel<xsimd::fma3<xsimd::avx2>>(narrow);
#endif
#if QKV_ISA_SSE41
    case Isa::SSE41: return gemm_micro_kernel<xsimd::sse4_1>(narrow);
#endif
#if QKV_ISA_NEON
    case Isa::NEON: return gemm_micro_kernel<xsimd::neon64>(narrow);
#endif
    default:  // no cut tiles, and no panel loop: gemm() calls the tile once per column panel
      return {kScalarMR, kScalarNR, &gemm_micro_scalar, &gemm_pack_rows_scalar, {}, nullptr, nullptr};
  }
}

// The register tile for an M x N product: the instruction set's main tile, unless its narrow tile pads C's
// rows and columns to enough less area to make up for running about 10% slower per FLOP (gemm_simd.h). On
// AVX-512 (6 x 64 and 8 x 32): N = 65 (the char LM head) and attention's 32 x 32 and 32 x 64 tiles take
// 8 x 32; 768 x 128 and 1024 x 1000 take 6 x 64.
// The narrow tile also takes a product of fewer than 256 rows of a row-major A that its rows divide and the main
// tile's do not, where both pad the columns alike (64 or 128 x 128 on AVX-512): the main tile's ragged last panel runs
// a tile cut to its rows, which costs nearly a full panel's time, a few % of a product this short. Measured on the
// 2-core AMD EPYC (AVX-512, 1 thread, best of 12 alternated batches; K 128 / 512): 40 x 128 +8.4 / +7.5%,
// 64 x 128 +4.7 / +5.3%, 128 x 128 +4.6 / +4.5%, 200 x 128 +8.4 / +3.1%; from 256 rows on, within noise. With
// a transposed A (the weight gradients, 128 x 768 x 128 and x 512) it was slower, and the char GPT step 6% slower.
// Past K = 512 the main tile again: the GPT-2 head's dx (64 x 2048 x 768, its weight from memory) 19.2 -> 16.6 ms per
// 64-row chunk at 2 threads with it, and in-cache products of 64-200 rows at K 768-2048 the same within 3% either way.
GemmMicroKernel select(int M, int N, int K, bool trans_a) {
  const GemmMicroKernel wide = select_tile(false), narrow = select_tile(true);
  if (narrow.nr == wide.nr && narrow.mr == wide.mr) return wide;
  auto padded = [&](const GemmMicroKernel& k) { return ceil_div(M, k.mr) * k.mr * ceil_div(N, k.nr) * k.nr; };
  if (11 * padded(narrow) < 10 * padded(wide)) return narrow;
  const bool same_columns = ceil_div(N, narrow.nr) * narrow.nr == ceil_div(N, wide.nr) * wide.nr;
  return K <= 512 && !trans_a && M < 256 && M % narrow.mr == 0 && M % wide.mr != 0 && same_columns ? narrow : wide;
}

// The per-thread home of packed panels, 64-byte aligned.
float* pack_buffer(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats + 16) buffer.resize(floats + 16);
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64) / sizeof(float);
}

struct Problem {
  bool trans_a, trans_b;
  int M, N, K;
  float alpha;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float beta;
  float* C;
  int ldc;
};

// Panel p of op(A): dst[k * mr + r] = op(A)(p*mr + r, k), zero past M.
void pack_a(float* dst, const Problem& g, const GemmMicroKernel& mk, int64_t p) {
  const int mr = mk.mr, i0 = static_cast<int>(p * mr), rows = std::min(mr, g.M - i0);
  if (g.trans_a) return mk.pack_rows(dst, mr, g.A + i0, g.lda, g.K, rows);  // A is (K, M): row k holds the mr values
  pack_transposed(dst, mr, g.A + static_cast<size_t>(i0) * g.lda, g.lda, rows, g.K);  // A is (M, K)
}

// Packed op(B) is laid out by K blocks (BLIS's order): block k0 (a multiple of kKC, kc = min(kKC, K - k0) rows) holds
// the `panels` packed panels one after another, each kc x nr, so the B block a tile sweeps is one contiguous run. Each
// panel whole (K x nr) put the block's pieces a panel's size apart: with K = 2048 and NR = 32, 16 pieces of 32 KB
// 256 KB apart, which all fall in the same half of a 1 MiB 16-way L2's sets and evicted each other while the A panels
// swept them (the head's dx = dz W at 64 x 2048 x 768 ran at 56% of the peak loop on one thread).
float* b_piece(float* pb, int64_t panels, int nr, int K, int64_t slot, int k0) {
  return pb + static_cast<size_t>(k0) * panels * nr + static_cast<size_t>(slot) * nr * std::min(kKC, K - k0);
}

// Panel q of op(B) into slot `slot` of `panels`: row k of the panel, op(B)(k, q*nr + j) for j < nr, at
// b_piece(.., k0) + (k - k0) * nr for k's block k0; zero past N.
void pack_b(float* pb, int64_t panels, const Problem& g, const GemmMicroKernel& mk, int64_t slot, int64_t q) {
  const int nr = mk.nr, j0 = static_cast<int>(q * nr), cols = std::min(nr, g.N - j0);
  for (int k0 = 0; k0 < g.K; k0 += kKC) {
    float* dst = b_piece(pb, panels, nr, g.K, slot, k0);
    const int kc = std::min(kKC, g.K - k0);
    if (!g.trans_b) {  // B is (K, N)
      mk.pack_rows(dst, nr, g.B + static_cast<size_t>(k0) * g.ldb + j0, g.ldb, kc, cols);
    } else if (nr >= 64 && mk.pack_transposed) {  // B is (N, K); gemm_simd.h says why 64
      mk.pack_transposed(dst, nr, g.B + static_cast<size_t>(j0) * g.ldb + k0, g.ldb, cols, kc);
    } else {
      pack_transposed(dst, nr, g.B + static_cast<size_t>(j0) * g.ldb + k0, g.ldb, cols, kc);
    }
  }
}

// Rows [k0, k0 + kb) of every panel of a row-major op(B) (K, N), all panels packed (slot q = panel q), within one K
// block. Packing all of B a block of rows at a time reads B in its own order: a panel at a time walks all K rows at a
// stride of N floats (one page per row when N = 1024), 4% slower at 1024^3.
void pack_b_rows(float* pb, int64_t panels, const Problem& g, const GemmMicroKernel& mk, int k0, int kb) {
  const int nr = mk.nr, block = k0 / kKC * kKC;
  for (int64_t q = 0; q < panels; ++q) {
    const int j0 = static_cast<int>(q * nr);
    mk.pack_rows(b_piece(pb, panels, nr, g.K, q, block) + static_cast<size_t>(k0 - block) * nr, nr,
                 g.B + static_cast<size_t>(k0) * g.ldb + j0, g.ldb, kb, std::min(nr, g.N - j0));
  }
}

// C = beta * C: what a product with K = 0 leaves.
void scale_c(const Problem& g) {
  for (int i = 0; i < g.M; ++i) {
    float* c = g.C + static_cast<size_t>(i) * g.ldc;
    for (int j = 0; j < g.N; ++j) c[j] = g.beta == 0.f ? 0.f : g.beta * c[j];
  }
}

// At most this many rows of op(A) go through the row kernels: packing would fill a register tile's MR rows
// with zeros, and pack all of op(B), to use one or two of them.
constexpr int kRowKernelMaxM = 2;

// Small M: each row of C from its row of op(A) (gathered when A is transposed), threaded over columns.
void gemm_rows(const Problem& g) {
  const GemmRowKernels rk = select_rows();
  const GemmRowFn fn = g.trans_b ? rk.dot : rk.axpy;
  thread_local std::vector<float> gathered;
  for (int i = 0; i < g.M; ++i) {
    const float* a = g.A + static_cast<size_t>(i) * g.lda;
    if (g.trans_a) {  // A is (K, M): row i of op(A) is column i of A
      gathered.resize(static_cast<size_t>(g.K));
      for (int k = 0; k < g.K; ++k) gathered[static_cast<size_t>(k)] = g.A[static_cast<size_t>(k) * g.lda + i];
      a = gathered.data();
    }
    float* c = g.C + static_cast<size_t>(i) * g.ldc;
    auto columns = [&](int64_t n0, int64_t n1) {
      const float* b = g.trans_b ? g.B + static_cast<size_t>(n0) * g.ldb : g.B + n0;
      fn(static_cast<int>(n1 - n0), g.K, g.alpha, a, b, g.ldb, g.beta, c + n0);
    };
    if (static_cast<int64_t>(g.N) * g.K >= (1 << 18) && num_threads() > 1) {
      // Chunks of 64 columns (whole vectors), each thread reading one contiguous run of B (parallel_for_runs):
      // batch-1 fp32 decoding of GPT-2 124M with the 4-lane kernels the wasm build runs (natively, `--isa sse4.1`,
      // 47-49 GB/s, 5 alternated rounds) 11.04-11.63 -> 10.84-11.09 ms against ranges in claim order.
      parallel_for_runs(ceil_div(g.N, 64),
                        [&](int64_t q0, int64_t q1) { columns(q0 * 64, std::min<int64_t>(q1 * 64, g.N)); });
    } else {
      columns(0, g.N);
    }
  }
}

// A row-major op(A) against a thin op(B) (N <= kThinMaxN columns: a LoRA adapter's t = x A^T and dt = dy B at rank
// r, a classifier of a few classes) by the thin kernel (gemm_kernel.h): the register tiles would pad N to a whole
// panel (8 -> 32 or 64 columns: a quarter of their multiply-adds useful) and pack all of op(A) for it; the thin kernel
// reads A in place, each row once, against op(B) transposed into a per-thread buffer (N K floats) unless it is
// transposed already. Threaded over blocks of kThinRowBlock rows. Its sums run in another order than the tiles' (each
// element's lanes, then the K % W tail), so gemm_swapped never takes it for its transposed product. Measured on the
// 2-core AMD EPYC (AVX-512), GPT-2's LoRA products at rank 8 and 1024 rows per layer (qkv, out, up and down), 2
// threads, best of 20: t = x A^T 0.90 -> 0.53 ms (98 -> 166 GFLOP/s, bound by reading x: 16 FLOP a float), dt = dy
// B 1.12 -> 0.58 ms; with the swapped dB below, the adapters' six products 76.7 -> 39.9 ms a training step.
constexpr int kThinMaxN = 16;
constexpr int kThinRowBlock = 48;  // a multiple of every register tile's rows (2, 3)
constexpr int kThinMinK = 32;

void gemm_thin(const Problem& g) {
  const GemmRowKernels rk = select_rows();
  const float* bt = g.B;
  int ldbt = g.ldb;
  thread_local std::vector<float> transposed;
  if (!g.trans_b) {  // op(B) = B (K, N): Bt = B^T (N, K)
    transposed.resize(static_cast<size_t>(g.N) * g.K);
    for (int k = 0; k < g.K; ++k)
      for (int j = 0; j < g.N; ++j)
        transposed[static_cast<size_t>(j) * g.K + k] = g.B[static_cast<size_t>(k) * g.ldb + j];
    bt = transposed.data();
    ldbt = g.K;
  }
  auto blocks = [&](int64_t b0, int64_t b1) {
    const int i0 = static_cast<int>(b0 * kThinRowBlock),
              i1 = static_cast<int>(std::min<int64_t>(g.M, b1 * kThinRowBlock));
    rk.thin(i1 - i0, g.N, g.K, g.alpha, g.A + static_cast<size_t>(i0) * g.lda, g.lda, bt, ldbt, g.beta,
            g.C + static_cast<size_t>(i0) * g.ldc, g.ldc);
  };
  const int64_t count = ceil_div(g.M, kThinRowBlock);
  if (static_cast<int64_t>(g.M) * g.N * g.K >= (1 << 18) && num_threads() > 1) {
    parallel_for(count, blocks);
  } else {
    blocks(0, count);
  }
}

// Packing op(B) costs K*N moves and saves strided, TLB-unfriendly reads for every A panel that sweeps it:
// worth it past 64 rows of A. Counted in rows, not panels: at 6-row panels, "more than 8 panels" packed B for
// 64 x 128 x 128, and its packing pass (a second parallel region) made the product 10% slower at 1 thread
// and 1.8x slower at 2 (wall time, best of 60 batches, the two rules alternated in one process).
// A row-major B no wider than 512 is read in place up to 2048 rows of A too: its rows are at most 2 KB apart,
// which the prefetchers follow, while packing it is a separate parallel region whose panels each thread then
// reads from the other core's cache. Measured on a 2-core AMD EPYC (AVX-512; 2 threads, wall time, best of
// 20 batches, the rules alternated in one process): the char GPT's weight gradients At*B 128 x 768 x 128
// 198 -> 306 GFLOP/s, 65 x 768 x 128 143 -> 270, A*B 768 x 128 x 512 329 -> 372, 100 x 512 x 512 235 -> 313,
// its training step 17.8 -> 16.7 ms; at 1 thread the same within 4% either way. The Seq2Seq's 6400-row
// products (6400 x 2048 x 512: 2-5% slower in place) keep the packed B.
bool packs_all_of_b(const Problem& g) { return g.trans_b || (g.M > 64 && (g.N > 512 || g.M > 2048)); }

void gemm_tiled(const Problem& g, const GemmMicroKernel& mk);

// dst (cols, rows) = src (rows, cols) transposed, src's rows ld_src apart, dst's ld_dst; in 16 x 16 tiles (each
// tile's rows and columns within a few cache lines), threaded over column tiles when large.
void transpose_into(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  constexpr int kT = 16;
  auto tiles = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int j0 = static_cast<int>(t) * kT, j1 = std::min(cols, j0 + kT);
      for (int i0 = 0; i0 < rows; i0 += kT) {
        const int i1 = std::min(rows, i0 + kT);
        for (int j = j0; j < j1; ++j)
          for (int i = i0; i < i1; ++i)
            dst[static_cast<size_t>(j) * ld_dst + i] = src[static_cast<size_t>(i) * ld_src + j];
      }
    }
  };
  const int64_t count = ceil_div(cols, kT);
  if (static_cast<int64_t>(rows) * cols >= (1 << 16) && num_threads() > 1) {
    parallel_for(count, tiles);
  } else {
    tiles(0, count);
  }
}

// The packed, tiled product of g, its op(B) cut into column blocks where gemm_tiled would pack more of it than
// gemm_packed_b_floats(): the register tiles' path, which gemm_swapped also takes for its transposed product (never the
// thin kernel or the row kernels, whose sums run in another order).
void gemm_blocked(const Problem& g) {
  const bool trans_b = g.trans_b;
  const int N = g.N, K = g.K, ldb = g.ldb;
  const float* const B = g.B;
  float* const C = g.C;
  const GemmMicroKernel mk = select(g.M, N, K, g.trans_a);
  // An op(B) that gemm_tiled would pack whole (packs_all_of_b) and that is larger than gemm_packed_b_floats() is cut
  // into blocks of columns, multiples of 64 (of every NR), each a product of its own with the same micro-kernel: the
  // per-thread buffer then holds one block. Every C element is the same sum (its column panel and tile are those of
  // the whole product). A block no wider than 512 reads a row-major B in place (packs_all_of_b); a transposed one
  // still packs its block. GPT-2 124M's feed-forward weights (3072 x 768) packed 9 MiB.
  const int64_t b_limit = packed_b_limit.load();
  if (packs_all_of_b(g) && static_cast<int64_t>(K) * N > b_limit) {
    const int cols = static_cast<int>(std::max<int64_t>(64, b_limit / K / 64 * 64));
    if (cols < N) {
      for (int n0 = 0; n0 < N; n0 += cols) {
        Problem part = g;
        part.N = std::min(cols, N - n0);
        part.B = trans_b ? B + static_cast<size_t>(n0) * ldb : B + n0;
        part.C = C + n0;
        gemm_tiled(part, mk);
      }
      return;
    }
  }
  gemm_tiled(g, mk);
}

// The swapped product below takes at most this many rows of A, against a B of at least kSwapMinB floats and a K of
// at least kSwapMinK: a small B's panels stay in cache and the transposes of C cost more than packing it (3-64 rows
// against 64-384 x 128 weights, in L2: 5-20% slower swapped), and with a short K the transposes' M N moves weigh
// against the product's 2 M N K FLOP (200 x 1536 x 128: 221 -> 180 GFLOP/s swapped).
constexpr int kSwapMaxM = 256;
constexpr int64_t kSwapMinB = int64_t{1} << 18;
constexpr int kSwapMinK = 256;
// A transposed A against a thin B (N <= kThinMaxN columns: LoRA's dB = dy^T t, (out, r) from 1024 rows at rank r) is
// swapped too, from kThinMinM rows of op(A) on: its C^T = B^T A has N rows, which the narrow tile fills (8 x 32 on
// AVX-512), where the direct product padded N to a panel of 32 or 64 columns and packed all of op(A). GPT-2's dB per
// layer at rank 8, 2 threads: 2.66 -> 0.45 ms (43 -> 251 GFLOP/s).
constexpr int kThinMinM = 64;

// C (M,N) = A B^T with few rows of A and a larger B (N > M: a weight times a prompt's or a head chunk's rows) as
// C^T = B A^T: B, the large operand, becomes op(A), which the tiled product reads in place while its op(B) is no
// wider than 512 (gemm_tiled), and A is the one packed, so no call transposes all of the weight into panels for a
// few rows. Measured on the 2-core AMD EPYC (AVX-512, a standalone loop over 8 distinct weights on huge pages,
// products alone): 32 x 768 x 3072 66 -> 145 GFLOP/s on 1 thread, 111 -> 271 on 2; 64 x 3072 x 768 147 -> 206 and
// 254 -> 355; 192 x 768 x 3072 117 -> 189; 3 x 3072 x 768 17 -> 22. Every element is the same sum as the direct
// product's (its k blocks in order, each step a fused multiply-add whose two factors trade places), alpha and beta
// applied as the tiles apply them; C^T lives in a per-thread buffer, C copied in (beta != 0) and out by tiles.
void gemm_swapped(const Problem& g) {
  thread_local std::vector<float> scratch;
  const size_t n = static_cast<size_t>(g.M) * g.N;
  if (scratch.size() < n) scratch.resize(n);
  float* ct = scratch.data();
  if (g.beta != 0.f) transpose_into(ct, g.M, g.C, g.ldc, g.M, g.N);
  gemm_blocked({!g.trans_b, !g.trans_a, g.N, g.M, g.K, g.alpha, g.B, g.ldb, g.A, g.lda, g.beta, ct, g.M});
  transpose_into(g.C, g.ldc, ct, g.M, g.N, g.M);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  check(M >= 0 && N >= 0 && K >= 0, "gemm: M, N and K must be >= 0, got ", M, ", ", N, ", ", K);
  if (M == 0 || N == 0) return;
  const Problem g{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  if (K == 0) return scale_c(g);
  if (M <= kRowKernelMaxM) return gemm_rows(g);
  if (!trans_a && N <= kThinMaxN && K >= kThinMinK) return gemm_thin(g);
  if (trans_b && !trans_a && M <= kSwapMaxM && N > M && K >= kSwapMinK && static_cast<int64_t>(N) * K >= kSwapMinB)
    return gemm_swapped(g);
  if (trans_a && !trans_b && N > kRowKernelMaxM && N <= kThinMaxN && M > kThinMinM) return gemm_swapped(g);

  gemm_blocked(g);
}

namespace {

// The packed, tiled product (the file's header) with the micro-kernel mk.
void gemm_tiled(const Problem& g, const GemmMicroKernel& mk) {
  const bool trans_a = g.trans_a, trans_b = g.trans_b;
  const int M = g.M, N = g.N, K = g.K, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  const float alpha = g.alpha, beta = g.beta, *const A = g.A, *const B = g.B;
  float* const C = g.C;
  const int mr = mk.mr, nr = mk.nr;
  const int64_t panels_a = ceil_div(M, mr), panels_b = ceil_div(N, nr);
  const bool full_last_b = N % nr == 0;
  const bool pack_all_b = packs_all_of_b(g);
  const int64_t packed_b = pack_all_b ? panels_b : (full_last_b ? 0 : 1);  // the ragged last panel at most

  // A row-major op(A) is read in place, MR rows at a time (the micro-kernel's broadcasts take any stride); only a
  // ragged last panel is packed, zero-padded, so that nothing past M is read. Measured at 1 thread (CPU time, best of
  // 6 alternated runs): in place is 20-39% faster at N = 65-128 (768 x 128 x 128, 768 x 65 x 128, 64 x 128 x 128:
  // the char GPT's narrow products), 3-4% at N = 384, even at N = 512. Wider products packed A until the micro-kernel
  // sweeps its row panel over the tile's column panels in one call (which keeps the panel in L1 across them): then
  // `qkv_bench gemm`, alternated, 1024^3 233 -> 245 GFLOP/s at 1 thread, 416 -> 445 at 2; GPT-2's 1024-row products
  // at 1 thread +4-9% (K 768-3072), at 2 threads -4 to +10%; its LoRA step without recomputation 1278-1391 ->
  // 1246-1272 ms.
  // A transposed A (K, M) is read in place too, MR contiguous floats a row of A, while rows are short:
  // 128-512 x 128 x 768 1.23-1.36x, 512 x 512 x 6400 1.11-1.15x, but 1024 x 512 x 6400 (rows of 4 KB) 0.92x.
  const bool a_in_place = !trans_a || (N <= 512 && M <= 512);
  // A row-major op(A) in place larger than the L2 caches (4 MiB) comes from memory: its panels are prefetched (below).
  const bool prefetch_a = a_in_place && !trans_a && static_cast<int64_t>(M) * K >= (int64_t{1} << 20);
  const bool full_last_a = M % mr == 0;
  // A packed op(A) is packed a block of panels at a time, at most gemm_packed_a_floats(), each block swept over all of
  // op(B) before the next is packed (op(B) is packed once, with the first): the per-thread buffer then holds that
  // block, not all of op(A). Every C element is the same sum either way (its K blocks in order, by the same
  // micro-kernel): the blocks change only which tiles exist. GPT-2 124M's feed-forward products at 1024 rows packed 12
  // MiB of A.
  const int64_t block_panels =
      a_in_place ? panels_a : std::clamp<int64_t>(packed_a_limit.load() / (static_cast<int64_t>(mr) * K), 1, panels_a);
  const int64_t packed_a = a_in_place ? (full_last_a ? 0 : 1) : block_panels;
  const size_t a_floats = static_cast<size_t>(packed_a) * mr * K;
  float* const packed = pack_buffer(a_floats + static_cast<size_t>(packed_b) * nr * K);
  float* const pa = packed;
  float* const pb = packed + a_floats;  // panel q (or the ragged last one) in slot q (or 0): b_piece

  // Threads pay off from a few hundred thousand multiply-adds on; below that one thread is faster than a
  // wake-up of the pool.
  const bool threaded = static_cast<int64_t>(M) * N * K >= (1 << 18) && num_threads() > 1;

  // Where B panel q's row k starts, and its row stride.
  auto b_panel = [&](int64_t q, int k0, int& ld) -> const float* {
    if (pack_all_b || (q == panels_b - 1 && !full_last_b)) {
      ld = nr;
      return b_piece(pb, packed_b, nr, K, pack_all_b ? q : 0, k0);
    }
    ld = ldb;
    return B + static_cast<size_t>(k0) * ldb + q * nr;
  };

  for (int64_t p0 = 0; p0 < panels_a; p0 += block_panels) {
    const int64_t p1 = std::min(panels_a, p0 + block_panels), block = p1 - p0;
    // Work items: this block's packed A panels, then (first block only) op(B)'s: blocks of kRowBlock rows across
    // all panels when all of a row-major B is packed, else one panel each.
    constexpr int kRowBlock = 16;
    const bool b_by_rows = pack_all_b && !trans_b;
    const int64_t a_items = a_in_place ? (full_last_a || p1 < panels_a ? 0 : 1) : block;
    const int64_t b_items = p0 > 0 ? 0 : b_by_rows ? ceil_div(K, kRowBlock) : packed_b;
    auto pack = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        if (i < a_items) {
          pack_a(pa + static_cast<size_t>(i) * mr * K, g, mk, a_in_place ? panels_a - 1 : p0 + i);
        } else if (b_by_rows) {
          const int k0 = static_cast<int>((i - a_items) * kRowBlock);
          pack_b_rows(pb, packed_b, g, mk, k0, std::min(kRowBlock, K - k0));
        } else {
          const int64_t slot = i - a_items;
          pack_b(pb, packed_b, g, mk, slot, pack_all_b ? slot : panels_b - 1);
        }
      }
    };
    if (threaded) {
      parallel_for(a_items + b_items, pack);
    } else {
      pack(0, a_items + b_items);
    }

    // Tiles of C in panel units; with threads, cut them finer until each thread has 16 (4 before: the GPT-2 head's
    // dx, 2 threads, 19.6-20.9 -> 17.6-18.6 ms a chunk, its LoRA step 1435-1453 -> 1411-1445 ms, the char GPT's and
    // Seq2Seq's steps the same within noise, alternated). Where all of the block's rows fit one tile (a few rows of A
    // against a wide B: the LM head's dx = dz W at 64 rows), the columns are cut first: every tile reads its own
    // columns of B once, where cutting the rows made each B block come from memory once per row tile (the GPT-2
    // head's dx at 64 x 2048 x 768, 2 threads: 22 -> 20 ms a chunk of rows).
    int64_t mc = std::max<int64_t>(1, kMC / mr), nc = std::max<int64_t>(1, kNC / nr);
    mc = std::min(mc, block);
    nc = std::min(nc, panels_b);
    if (threaded) {
      const int64_t want = 16 * num_threads();
      const bool columns_first = ceil_div(block, mc) == 1;
      while (ceil_div(block, mc) * ceil_div(panels_b, nc) < want && (mc > 1 || nc > 1)) {
        if (mc > 1 && (nc == 1 || (!columns_first && mc >= nc))) {
          mc = ceil_div(mc, 2);
        } else {
          nc = ceil_div(nc, 2);
        }
      }
    }
    const int64_t tiles_m = ceil_div(block, mc), tiles_n = ceil_div(panels_b, nc);

    auto compute = [&](int64_t t0, int64_t t1) {
      alignas(64) float edge[16 * 64];  // one MR x NR tile for the ragged edges of C (MR <= 16, NR <= 64)
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p_begin = p0 + (t / tiles_n) * mc, p_end = std::min(p_begin + mc, p1);
        const int64_t q_begin = (t % tiles_n) * nc, q_end = std::min(q_begin + nc, panels_b);
        for (int k0 = 0; k0 < K; k0 += kKC) {
          const int kc = std::min(kKC, K - k0);
          const float blk_beta = k0 == 0 ? beta : 1.f;
          for (int64_t p = p_begin; p < p_end; ++p) {
            const int i0 = static_cast<int>(p * mr), rows = std::min(mr, M - i0);
            const bool direct = a_in_place && rows == mr;
            // op(A)(i0 + r, k0 + k): A[(i0 + r) * lda + k0 + k] in place, or A[(k0 + k) * lda + i0 + r] with trans_a
            const float* ap =
                !direct   ? pa + static_cast<size_t>(a_in_place ? 0 : p - p0) * mr * K + static_cast<size_t>(k0) * mr
                : trans_a ? A + static_cast<size_t>(k0) * lda + i0
                          : A + static_cast<size_t>(i0) * lda + k0;
            const int rs_a = !direct ? 1 : trans_a ? 1 : lda, cs_a = !direct ? mr : trans_a ? lda : 1;
            // A large row-major A read in place comes from memory the first time (a weight as op(A) in gemm_swapped:
            // the LM head's (V, C) rows, 154 MB for GPT-2, read once per chunk of rows): its MR rows are MR streams of
            // kc floats each, too short for the hardware prefetchers to ramp up on, so the next panel's rows of this K
            // block are prefetched while this one computes (one prefetch per line: MR kc / 16 of them against the
            // panel's MR kc NC multiply-adds). The GPT-2 head's forward at 64 rows (2 threads) 15.0 -> 13.8 ms. An A in
            // cache gains nothing from them (the char GPT's 768 x 128 x 128 forward ran 1-3% slower with them).
            if (prefetch_a && direct && p + 1 < p_end) {
              const float* next = ap + static_cast<size_t>(mr) * lda;
              const int next_rows = std::min(mr, M - i0 - mr);  // a ragged last panel's rows end at M
              for (int r = 0; r < next_rows; ++r)
                for (int k = 0; k < kc; k += 16) __builtin_prefetch(next + static_cast<size_t>(r) * lda + k, 0, 3);
            }
            // The row panel's sweep over its full column panels is one call, the loop inside the SIMD code (the
            // ragged last panel, if any, goes below). Called per panel, the arguments, the indirect call and this
            // loop's bookkeeping per 4 x 8 tile cost the wasm build 3-4% of the char GPT step (Node 20, relaxed
            // SIMD, the two builds alternated in one process: 2 threads 58.0 -> 55.8 ms, 1 thread 107.3 -> 103.9);
            // natively, with tiles of 6 x 64 floats, the same within noise.
            const int64_t q_full = full_last_b ? q_end : std::min(q_end, panels_b - 1);
            int64_t q = q_begin;
            if (mk.panels && rows == mr && q < q_full) {
              int ldbp = 0;
              const float* bp = b_panel(q, k0, ldbp);
              const ptrdiff_t b_step = pack_all_b ? static_cast<ptrdiff_t>(nr) * kc : nr;
              mk.panels(static_cast<int>(q_full - q), b_step, kc, ap, rs_a, cs_a, bp, ldbp,
                        C + static_cast<size_t>(i0) * ldc + q * nr, ldc, alpha, blk_beta);
              q = q_full;
            }
            for (; q < q_end; ++q) {
              int ldbp = 0;
              const float* bp = b_panel(q, k0, ldbp);
              const int j0 = static_cast<int>(q * nr), cols = std::min(nr, N - j0);
              float* c = C + static_cast<size_t>(i0) * ldc + j0;
              if (cols == nr && (rows == mr || mk.rows[rows])) {  // a ragged last panel: the tile cut to its rows
                (rows == mr ? mk.fn : mk.rows[rows])(kc, ap, rs_a, cs_a, bp, ldbp, c, ldc, alpha, blk_beta);
                continue;
              }
              mk.fn(kc, ap, rs_a, cs_a, bp, ldbp, edge, nr, 1.f, 0.f);
              for (int r = 0; r < rows; ++r) {
                float* cr = c + static_cast<size_t>(r) * ldc;
                const float* er = edge + r * nr;
                for (int j = 0; j < cols; ++j)
                  cr[j] = blk_beta == 0.f ? alpha * er[j] : alpha * er[j] + blk_beta * cr[j];
              }
            }
          }
        }
      }
    };
    if (threaded) {
      parallel_for(tiles_m * tiles_n, compute);
    } else {
      compute(0, tiles_m * tiles_n);
    }
  }
}

}  // namespace

int64_t gemm_packed_a_floats() { return packed_a_limit.load(); }
int64_t gemm_packed_b_floats() { return packed_b_limit.load(); }
void set_gemm_packed_b_floats(int64_t floats) {
  check(floats >= 1, "set_gemm_packed_b_floats: floats must be >= 1, got ", floats);
  packed_b_limit.store(floats);
}
void set_gemm_packed_a_floats(int64_t floats) {
  check(floats >= 1, "set_gemm_packed_a_floats: floats must be >= 1, got ", floats);
  packed_a_limit.store(floats);
}

void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      float acc = 0.f;
      for (int k = 0; k < K; ++k) {
        const float a = trans_a ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        const float b = trans_b ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        acc += a * b;
      }
      float& c = C[static_cast<size_t>(i) * ldc + j];
      c = alpha * acc + (beta == 0.f ? 0.f : beta * c);
    }
  }
}

}  // namespace qkv::kernels
