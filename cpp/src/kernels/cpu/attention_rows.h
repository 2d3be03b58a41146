#pragma once
// What attention.cpp and the per-instruction-set files share: one tile of scores (a block of query rows x a
// block of key columns) and the row-wise passes of the fused kernel over it, declared here and instantiated
// in kernels/cpu/arch/<isa>.cpp (bodies in attention_simd.h; the scalar versions live in attention.cpp).
#include <xsimd/config/xsimd_arch.hpp>

namespace qkv::kernels {

// A (rows, cols) tile at S with row stride ld: query t0 + r against key s0 + j.
// Masks: row r sees the columns j < visible(r) = clamp(r + diag + 1, 0, cols) (diag = t0 - s0 under the
// causal mask, cols without it), and among those only the keys whose bias is 0 (bias: (cols), 0 or -inf
// for padding; nullptr = no padding). Columns a row does not see come out as exactly 0.
// ld is a multiple of 16 floats (the widest vector) and the passes may read and write a row's padding,
// [cols, ld), and read bias up to ld, so that they run whole vectors; nothing there is a result.
struct AttentionTile {
  float* S;
  int ld, rows, cols;
  const float* bias;
  int diag;
};

// Forward, one key block of the online softmax. In: S = the scaled scores; m, l (rows): each row's running
// max and sum of exp(score - m) over the key blocks before this one (-inf and 0 before the first).
// Out: S = P = exp(S - m'), m' = max(m, max of the visible scores), l = l * alpha + rowsum(P), and
// alpha (rows) = exp(m - m'), the factor the caller applies to the output accumulated so far.
// A row that has seen no key yet keeps m = -inf, l = 0, gets P = 0 and alpha = 1.
template <class Arch>
void attention_softmax_rows(const AttentionTile& t, float* m, float* l, float* alpha);

// Backward: S = P = exp(S - lse) from the saved per-row logsumexp (rows); 0 where masked. lse = +inf marks
// a row with no visible key (P = 0 everywhere).
template <class Arch>
void attention_probs_rows(const AttentionTile& t, const float* lse);

// Backward: dP (same layout as the tile, stride t.ld) becomes dS = P * (dP - D), with P = t.S and
// D (rows) = rowsum(dO * O).
template <class Arch>
void attention_dscores_rows(const AttentionTile& t, float* dP, const float* D);

// Backward: D (rows) = rowsum(dO * O) over a head's hs columns, rows ld apart (dO and O alike).
template <class Arch>
void attention_delta_rows(float* D, const float* dO, const float* O, int ld, int rows, int hs);

extern template void attention_softmax_rows<xsimd::avx512f>(const AttentionTile&, float*, float*, float*);
extern template void attention_probs_rows<xsimd::avx512f>(const AttentionTile&, const float*);
extern template void attention_dscores_rows<xsimd::avx512f>(const AttentionTile&, float*, const float*);
extern template void attention_delta_rows<xsimd::avx512f>(float*, const float*, const float*, int, int, int);
extern template void attention_softmax_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, float*, float*, float*);
extern template void attention_probs_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, const float*);
extern template void attention_dscores_rows<xsimd::fma3<xsimd::avx2>>(const AttentionTile&, float*, const float*);
extern template void attention_delta_rows<xsimd::fma3<xsimd::avx2>>(float*, const float*, const float*, int, int, int);
extern template void attention_softmax_rows<xsimd::sse4_1>(const AttentionTile&, float*, float*, float*);
extern template void attention_probs_rows<xsimd::sse4_1>(const AttentionTile&, const float*);
extern template void attention_dscores_rows<xsimd::sse4_1>(const AttentionTile&, float*, const float*);
extern template void attention_delta_rows<xsimd::sse4_1>(float*, const float*, const float*, int, int, int);
extern template void attention_softmax_rows<xsimd::neon64>(const AttentionTile&, float*, float*, float*);
extern template void attention_probs_rows<xsimd::neon64>(const AttentionTile&, const float*);
extern template void attention_dscores_rows<xsimd::neon64>(const AttentionTile&, float*, const float*);
extern template void attention_delta_rows<xsimd::neon64>(float*, const float*, const float*, int, int, int);

}  // namespace qkv::kernels
