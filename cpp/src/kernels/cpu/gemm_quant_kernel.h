#pragma once
// What gemm_quant.cpp and the per-instruction-set files share: the kernels of the product with quantized weights
// (kernels.h: gemm_quant), declared here and instantiated in kernels/cpu/arch/<isa>.cpp.
//
// Dequantizing in registers. A vector load of 4V bytes of a packed row (V float lanes) gives V 32-bit words; lane i
// holds 4 int8 codes (elements 4i .. 4i+3), 8 Q4 codes (elements 8i .. 8i+7, nibble t = element 8i + t) or 2
// halves (elements 2i, 2i+1). Shifts and masks turn the word vector into R float vectors (R = 4, 8 or 2), vector t
// holding the elements R*i + t of the block of R*V elements, with no shuffle (wasm's SIMD128 has few cheap ones).
// The activations are permuted to match, once per call (M rows of K: nothing next to N rows of K): in the
// permuted order ("block order") element R*i + t of a block sits at t*V + i. A dot product does not care about
// the order of its terms, so a row of A in block order times a row of W in block order is the product; only the
// rounding order of the fp32 arithmetic differs from the reference (the contract of ops/op_list.def's gemm_quant).
// Elements past the last whole block (K % (R*V)) stay in natural order and are handled one by one. Where an
// instruction set converts halves itself (F16C, AVX-512F), f16 blocks are in natural order, and where it has a
// sign-extending load (AVX2, AVX-512F), int8 blocks too (QuantKernels::order).
// The gemm path (many rows of A) dequantizes panels of W in natural order instead: a few shuffles per block in
// registers (gemm_quant_simd.h: to_natural) cost less than a copy of A, which is large there.
#include <cstddef>
#include <cstdint>
#include <vector>
#include <xsimd/config/xsimd_arch.hpp>

#include "ops/weight_format.h"

namespace qkv::kernels {

using ops::WeightFormat;

// How far ahead of its reads a row kernel prefetches its rows of W (bytes), and the prefetch. The rows are one
// sequential stream, but the hardware prefetchers alone left the kernels waiting on it. GPT-2 124M's decode (prompt
// 32, 64 tokens, ms a token, the distances alternated in one shell, 3-4 rounds of 3 generations; 2-core AMD EPYC,
// 45-75 GB/s):
//   q4a8   2 threads: none 2.00-2.07, 4 KiB 1.75-1.82, 8 KiB 1.73-1.82;  1 thread: 2.96-2.99, 2.43-2.48, 2.30-2.34
//   int8a8 2 threads: none 2.95-3.25, 4 KiB 2.62-2.80, 8 KiB 2.59-2.85;  1 thread: 4.12-4.18, 3.61-3.77, 3.28-3.46
//   int8   2 threads: none 2.75-2.78, 4 KiB 2.49-2.65, 8 KiB 2.51-2.70
// The address is formed as an integer: past the last row it points outside W, which a prefetch may, but pointer
// arithmetic may not. WebAssembly has no prefetch (the builtin compiles to nothing there).
constexpr uintptr_t kPrefetchAhead = 8192;
inline void prefetch_weights(const uint8_t* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kPrefetchAhead), 0, 3);
}

// Float vectors per word vector: the block of a format is block_factor(f) * lanes elements. The activations' block
// order uses the same factor, except where an instruction set converts halves in natural order (QuantKernels::order).
constexpr int block_factor(WeightFormat f) { return f == WeightFormat::Int8 ? 4 : f == WeightFormat::Q4 ? 8 : 2; }

// C[m, n] = dot(a_m, deq(W[n])) for m < M (M <= kQuantRowsMax) and n in [n0, n1): a_m = A + m * lda in block order,
// W's row n at W + n * stride with its scales at scales + n * spr.
struct QuantRows {
  WeightFormat f;
  int M, K;
  const float* A;
  int lda;
  const uint8_t* W;
  size_t stride;
  const float* scales;
  int spr;
  float* C;
  int ldc;
};
constexpr int kQuantRowsMax = 4;
using QuantRowsFn = void (*)(const QuantRows& q, int n0, int n1);
// out (K floats) = W's row dequantized, in natural order.
using QuantDequantFn = void (*)(WeightFormat f, const uint8_t* row, const float* row_scales, int K, float* out);

struct QuantKernels {
  int lanes;     // V: 1 for the scalar kernels (block order is then the natural order)
  int order[5];  // per format (WeightFormat's value): the R of the activations' block order (1: natural order)
  QuantRowsFn rows;
  QuantDequantFn dequantize;
};

template <class Arch>
QuantKernels quant_kernels();

// Room for a Q4 row's group scales as floats, for a loader that converts the row's bfloat16 first
// (Q4Loader<avx512f>::row_scales, where decoding's blocks are a few operations each); the other kernels convert
// each block's scale where they use it (a shift), which measured faster in the wasm core than a conversion pass.
// On the stack up to kStack groups (K up to 16384 for one row, 4096 for four); a longer row uses a buffer that grows
// once per thread. Tag is the instruction set's type, so that each arch unit keeps its own copy (an inline class in a
// header every arch unit includes would be one copy for all of them, compiled with whichever unit's flags the linker
// kept).
template <class Tag>
class Q4RowScales {
 public:
  // Room for `rows` rows' scales, one after the other (G floats each).
  float* buffer(int K, int rows = 1) {
    const size_t n = static_cast<size_t>(ops::q4_groups(K)) * static_cast<size_t>(rows);
    if (n <= kStack) return stack_;
    thread_local std::vector<float> heap;
    if (heap.size() < n) heap.resize(n);
    return heap.data();
  }

 private:
  static constexpr int kStack = 512;
  alignas(64) float stack_[kStack];
};
// The active instruction set's kernels (the scalar ones last): gemm_quant's table.
QuantKernels select_quant_kernels();

extern template QuantKernels quant_kernels<xsimd::avx512f>();
extern template QuantKernels quant_kernels<xsimd::fma3<xsimd::avx2>>();
extern template QuantKernels quant_kernels<xsimd::sse4_1>();
extern template QuantKernels quant_kernels<xsimd::neon64>();

}  // namespace qkv::kernels
