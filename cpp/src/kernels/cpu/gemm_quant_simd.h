#pragma once
// The SIMD bodies of the product with quantized weights (gemm_quant_kernel.h has the scheme), one template per
// instruction set: included only by kernels/cpu/arch/<isa>.cpp, which instantiate quant_kernels<Arch>.
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/gemm_quant_kernel.h"
#include "kernels/cpu/gemm_simd.h"  // gemm_madd: FMA, or relaxed SIMD's madd in that wasm build

namespace qkv::kernels {
namespace quant_detail {

// How a block of 2V halves (4V bytes) becomes two float vectors. The generic way splits each word into its low
// and high half (block order 2); an instruction set that converts halves itself (F16C's vcvtph2ps under AVX2,
// AVX-512F's own) specializes this in its arch file, converting 8 or 16 consecutive halves at a time (natural
// order: order 1). Either way exact, subnormals included.
template <class Arch>
struct HalfLoader {
  static constexpr int order = 2;
};

// How a block of 4V int8 codes becomes four float vectors. The generic way shifts each word's bytes into place
// (block order 4: two shifts and a convert per vector); an instruction set with a sign-extending load (vpmovsxbd
// under AVX2 and AVX-512F) specializes this, loading V consecutive codes per vector in natural order (order 1):
// one load-extend and a convert per vector. On the development machine's AVX-512 core this took the int8
// matrix-vector product from 26 to 34 elements per ns on one thread (a 768 x 768 product held in L2). SSE4.1's
// pmovsxbd would be the same in x86, but the wasm build compiles this set to SIMD128, where it is a 32-bit load
// and two extends: no fewer operations than the shifts.
template <class Arch>
struct Int8Loader {
  static constexpr int order = 4;
};

// How Q4 codes become float vectors. The generic way loads 4V bytes (8V codes: V/4 groups of 32) as words and
// shifts and masks each nibble into place (block order 8, blocks of 8V elements). AVX-512F specializes it
// (kLookup): the same 8 vectors of the same 64 bytes, each nibble looked up in a 16-float table of the codes less 8
// (vpermps reads the low 4 bits of each lane: a shift and a permute a vector where a mask, a subtract and a
// conversion took three), and its groups' scales from a row's floats (row_scales) with one permute (group_scales'
// blends took three); its `group` dequantizes one group of 32 in natural order, for the panels of the gemm path and
// a row's groups past its last 128 elements (which the generic loaders take element by element). Before, AVX-512
// took each group of 32 alone (its 16 bytes zero-extended, block order 2: three shuffles a group where this has two
// and a quarter): a 768-wide product in cache on one thread 0.73 -> 0.50 ns a group, and with rows_q4_lookup's four
// rows at a time GPT-2 124M's q4 decode on one thread (alternated) 4.18-4.34 -> 3.14-3.51 ms a token; on two, where
// the memory (43-49 GB/s) bounds both, 1.93-2.48 either way, 1.98-2.09 the medians of 6-8 rounds. (Under AVX2
// vpermps has 8 entries: it keeps the generic way.)
template <class Arch>
struct Q4Loader {
  static constexpr int order = 8;
  static constexpr bool kLookup = false;
};

// Interleaving two vectors: lo = (a0 b0 a1 b1 ...) from their low halves, hi the same from their high halves.
// xsimd's zip_lo / zip_hi are exactly that on 128-bit vectors (SSE4.1 and so SIMD128, NEON); on wider ones they
// interleave within each 128-bit lane, so AVX2 and AVX-512 specialize this in their arch files.
template <class Arch>
struct Zip {
  using F = xsimd::batch<float, Arch>;
  static_assert(F::size <= 4, "vectors wider than 128 bits need their own Zip (xsimd's zips stay in 128-bit lanes)");
  static void zip(const F& a, const F& b, F& lo, F& hi) {
    lo = xsimd::zip_lo(a, b);
    hi = xsimd::zip_hi(a, b);
  }
};

template <class Arch>
struct Simd {
  using F = xsimd::batch<float, Arch>;
  using I = xsimd::batch<int32_t, Arch>;
  static constexpr int V = static_cast<int>(F::size);

  // 4V bytes as V words, one unaligned vector load (the intrinsics' vector types may alias any memory; a memcpy into
  // an int array here compiled to two 16-byte stores and a 32-byte reload: a failed store forwarding per block).
  static I words(const uint8_t* p) { return I::load_unaligned(reinterpret_cast<const int32_t*>(p)); }

  // The lanes' scales of a Q4 block: lane i of every vector holds an element of group i / 4 of the block, so the
  // vector is s[0] broadcast, then s[g] put in the lanes of group g (broadcasts and blends: building it in memory
  // and loading it back stalled on store forwarding, 2x slower).
  struct GroupLanes {
    xsimd::batch_bool<float, Arch> of[V / 4 > 1 ? V / 4 : 1];
    GroupLanes() {
      alignas(64) float lane[V];
      for (int i = 0; i < V; ++i) lane[i] = static_cast<float>(i / 4);
      const F group = F::load_aligned(lane);
      for (int g = 0; g < V / 4; ++g) of[g] = group == F(static_cast<float>(g));
    }
  };
  // Built from the row's bfloat16 scale words (ops/weight_format.h), groups g0 .. g0 + V/4 - 1: each a shift.
  static F group_scales(const float* words, int g0, const GroupLanes& lanes) {
    F scale(ops::q4_scale(words, g0));
    for (int g = 1; g < V / 4; ++g) scale = xsimd::select(lanes.of[g], F(ops::q4_scale(words, g0 + g)), scale);
    return scale;
  }

  // A Q4 block's 8 vectors of codes less 8, unscaled: nibble t of each word (the last one by a logical shift alone).
  static void q4_codes(const I& x, F* w) {
    const I mask(0xf), eight(8);
    w[0] = xsimd::to_float((x & mask) - eight);
    w[1] = xsimd::to_float(((x >> 4) & mask) - eight);
    w[2] = xsimd::to_float(((x >> 8) & mask) - eight);
    w[3] = xsimd::to_float(((x >> 12) & mask) - eight);
    w[4] = xsimd::to_float(((x >> 16) & mask) - eight);
    w[5] = xsimd::to_float(((x >> 20) & mask) - eight);
    w[6] = xsimd::to_float(((x >> 24) & mask) - eight);
    w[7] = xsimd::to_float(xsimd::bitwise_cast<I>(xsimd::bitwise_cast<xsimd::batch<uint32_t, Arch>>(x) >> 28) - eight);
  }

  // The R vectors of one block, each element dequantize_element's float (int8 left unscaled: its one scale per row
  // is applied to the row's sum). Q4: s is the row's scale words and g0 the block's first group.
  template <WeightFormat f>
  static void block(const uint8_t* p, const float* s, int g0, const GroupLanes& lanes, F* w) {
    // Only the branches that shift words load them: a block of the 16-byte Q4 loader is shorter than a word vector,
    // and an unused load (kept by an unoptimized build) would read past the row.
    if constexpr (f == WeightFormat::Int8 && Int8Loader<Arch>::order == 1) {
      Int8Loader<Arch>::load(p, w);
    } else if constexpr (f == WeightFormat::Int8) {
      const I x = words(p);
      w[0] = xsimd::to_float((x << 24) >> 24);
      w[1] = xsimd::to_float((x << 16) >> 24);
      w[2] = xsimd::to_float((x << 8) >> 24);
      w[3] = xsimd::to_float(x >> 24);
    } else if constexpr (f == WeightFormat::Q4) {
      q4_codes(words(p), w);
      const F scale = group_scales(s, g0, lanes);
      for (int t = 0; t < 8; ++t) w[t] *= scale;
    } else if constexpr (f == WeightFormat::BF16) {
      const I x = words(p);
      w[0] = xsimd::bitwise_cast<F>(x << 16);
      w[1] = xsimd::bitwise_cast<F>(x & I(static_cast<int32_t>(0xffff0000u)));
    } else if constexpr (HalfLoader<Arch>::order == 1) {
      HalfLoader<Arch>::load(p, w);
    } else {
      const I x = words(p);
      w[0] = half(x & I(0xffff));
      w[1] = half((x >> 16) & I(0xffff));
    }
  }

  // IEEE halves (in the low 16 bits of each lane) to floats, exactly: a normal half's exponent rebiased by adding
  // 112 << 23; a subnormal m * 2^-24 as the normal float 2^-14 (1 + m/1024) less 2^-14 (exact: Sterbenz), so that
  // no float subnormal is ever an operand (x86 would take a slow assist on one); inf and NaN keep all-ones exponents.
  static F half(I h) {
    const I a = h & I(0x7fff), sign = (h & I(0x8000)) << 16, m = a << 13, e = a & I(0x7c00);
    const I normal = m + I(112 << 23);
    const I sub = xsimd::bitwise_cast<I>(xsimd::bitwise_cast<F>(m + I(113 << 23)) - F(6.103515625e-05f));  // 2^-14
    const I special = m | I(0x7f800000);
    const I v = xsimd::select(e == I(0x7c00), special, xsimd::select(e == I(0), sub, normal));
    return xsimd::bitwise_cast<F>(v | sign);
  }

  template <WeightFormat f>
  static constexpr int R = f == WeightFormat::Q4 ? Q4Loader<Arch>::order : block_factor(f);
  // The block order the loaders leave format f in (QuantKernels::order; 1: natural).
  template <WeightFormat f>
  static constexpr int order_of = f == WeightFormat::F16    ? HalfLoader<Arch>::order
                                  : f == WeightFormat::Int8 ? Int8Loader<Arch>::order
                                                            : R<f>;
  // Bytes of W per block of R * V elements.
  template <WeightFormat f>
  static constexpr int block_bytes = f == WeightFormat::Int8 ? R<f>* V
                                     : f == WeightFormat::Q4 ? R<f>* V / 2
                                                             : R<f>* V * 2;
  // A Q4 block's sum of a (q - 8) for one row of A in block order (w: its 8 vectors of codes less 8), in two chains.
  static F q4_sum(const float* a, const F* w) {
    F s0 = F::load_unaligned(a) * w[0], s1 = F::load_unaligned(a + V) * w[1];
    for (int t = 2; t < 8; t += 2) {
      s0 = gemm_madd(F::load_unaligned(a + t * V), w[t], s0);
      s1 = gemm_madd(F::load_unaligned(a + (t + 1) * V), w[t + 1], s1);
    }
    return s0 + s1;
  }
  // Q4 with the lookup loader (AVX-512F), NR rows of W at a time: 4 when A has one row (decoding), so that four
  // streams of W are in flight, each row's multiply-adds by its blocks' scales (one chain a row) overlap the other
  // rows', and the four sums are reduced together (Q4Loader::sum4: 13 operations where each row's own horizontal sum
  // took 8, waiting on its last multiply-add). A 768-wide product on one thread in cache: 0.50 (a row at a time, two
  // chains) -> 0.56 ns a group, but streaming from memory on both threads 0.78 -> 0.65. A row's sum is the same
  // float whichever NR takes it (the same chain and the same reduction: sum4 of the row four times when alone), so
  // that C does not depend on how the rows fell to the threads.
  template <int MR, int NR>
  static void rows_q4_lookup(const QuantRows& q, int n0, int n1) {
    using L = Q4Loader<Arch>;
    constexpr int B = 8 * V;  // a block: 4 groups of 32, 64 bytes (one prefetch each)
    const int blocks = q.K / B, G = ops::q4_groups(q.K);
    Q4RowScales<Arch> q4_scales;
    float* converted = q4_scales.buffer(q.K, NR);
    for (int n = n0; n + NR <= n1; n += NR) {
      const uint8_t* row[NR];
      const float *s[NR], *sf[NR];  // each row's scale words, and as floats (L::row_scales: one per group)
      for (int j = 0; j < NR; ++j) {
        row[j] = q.W + static_cast<size_t>(n + j) * q.stride;
        s[j] = q.scales + static_cast<size_t>(n + j) * q.spr;
        prefetch_weights(reinterpret_cast<const uint8_t*>(s[j]));  // the scales' own stream, 8 KiB ahead too
        sf[j] = L::row_scales(s[j], q.K, converted + static_cast<size_t>(j) * G);
      }
      F acc[NR][MR];
      for (int j = 0; j < NR; ++j)
        for (int m = 0; m < MR; ++m) acc[j][m] = F(0.f);
      // Each block's sum of a (q - 8) per row of A, then one multiply-add by the lanes' scales.
      auto q4_block = [&](int j, int b) {
        F w[8];
        const uint8_t* p = row[j] + static_cast<size_t>(b) * 64;
        prefetch_weights(p);
        L::codes(p, w);
        const F scale = L::scales(sf[j] + b * (B / 32));
        const float* a = q.A + static_cast<size_t>(b) * B;
        for (int m = 0; m < MR; ++m)
          acc[j][m] = gemm_madd(q4_sum(a + static_cast<size_t>(m) * q.lda, w), scale, acc[j][m]);
      };
      for (int b = 0; b < blocks; ++b)
        for (int j = 0; j < NR; ++j) q4_block(j, b);
      // Whole groups past the last block are in natural order (2V = 32 elements): dequantized and multiplied as they
      // are; the elements past the last whole group one by one, after the sum.
      int done = blocks * B;
      for (; done + 32 <= q.K; done += 32)
        for (int j = 0; j < NR; ++j) {
          F w[2];
          L::group(row[j] + done / 2, sf[j][done / 32], w);
          for (int m = 0; m < MR; ++m) {
            const float* am = q.A + static_cast<size_t>(m) * q.lda + done;
            acc[j][m] = gemm_madd(F::load_unaligned(am), w[0], acc[j][m]);
            acc[j][m] = gemm_madd(F::load_unaligned(am + V), w[1], acc[j][m]);
          }
        }
      for (int m = 0; m < MR; ++m) {
        float c[4];  // sum4 of rows 0 .. NR - 1 (the last repeated when NR < 4)
        L::sum4(acc[0][m], acc[std::min(1, NR - 1)][m], acc[std::min(2, NR - 1)][m], acc[std::min(3, NR - 1)][m], c);
        const float* a = q.A + static_cast<size_t>(m) * q.lda;
        for (int j = 0; j < NR; ++j) {
          for (int k = done; k < q.K; ++k) c[j] += a[k] * ops::dequantize_element(WeightFormat::Q4, row[j], s[j], k);
          q.C[static_cast<size_t>(m) * q.ldc + n + j] = c[j];
        }
      }
    }
  }

  // Rows n0 .. n1 of C for MR rows of A. U accumulators per row of A keep the FMA chains short when MR is small.
  template <WeightFormat f, int MR>
  static void rows(const QuantRows& q, int n0, int n1) {
    if constexpr (f == WeightFormat::Q4 && Q4Loader<Arch>::kLookup) {
      int n = n0;
      if constexpr (MR == 1) {
        n = n0 + (n1 - n0) / 4 * 4;
        rows_q4_lookup<MR, 4>(q, n0, n);
      }
      return rows_q4_lookup<MR, 1>(q, n, n1);
    }
    // U accumulators per row of A, indexed by a compile-time t (the vectors of a block) so they stay in registers;
    // Q4 adds each block's scaled sum to one accumulator per row (a runtime index, b % U, put them on the stack: a
    // store-forwarding round trip per block, 2x slower).
    constexpr int Rf = R<f>, U = f == WeightFormat::Q4 ? 1 : MR == 1 ? 4 : MR == 2 ? 2 : 1;
    constexpr int B = Rf * V;  // elements per block
    const int blocks = q.K / B;
    constexpr int kBlocksPerLine = std::max(1, 64 / block_bytes<f>);  // one prefetch per 64-byte line of the row
    const GroupLanes lanes;
    for (int n = n0; n < n1; ++n) {
      const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
      const float* s = q.spr ? q.scales + static_cast<size_t>(n) * q.spr : nullptr;  // the row's scale words
      F acc[MR][U];
      for (int m = 0; m < MR; ++m)
        for (int u = 0; u < U; ++u) acc[m][u] = F(0.f);
      for (int b = 0; b < blocks; ++b) {
        if (b % kBlocksPerLine == 0) prefetch_weights(row + static_cast<size_t>(b) * block_bytes<f>);
        F w[Rf];
        const float* a = q.A + static_cast<size_t>(b) * B;
        if constexpr (f == WeightFormat::Q4) {
          // The block's sum of a (q - 8) per row of A in two chains, then one multiply-add by the lanes' scales:
          // 8 fewer multiplies per block than scaling every code (SSE4.1 and SIMD128 are bound by operations here).
          q4_codes(words(row + static_cast<size_t>(b) * 4 * V), w);
          const F scale = group_scales(s, b * (B / 32), lanes);
          for (int m = 0; m < MR; ++m)
            acc[m][b % U] = gemm_madd(q4_sum(a + static_cast<size_t>(m) * q.lda, w), scale, acc[m][b % U]);
        } else {
          block<f>(row + static_cast<size_t>(b) * block_bytes<f>, s, 0, lanes, w);  // not Q4: no group
          for (int t = 0; t < Rf; ++t)
            for (int m = 0; m < MR; ++m)
              acc[m][t % U] =
                  gemm_madd(F::load_unaligned(a + static_cast<size_t>(m) * q.lda + t * V), w[t], acc[m][t % U]);
        }
      }
      // In natural order, whole vectors past the last block still go through the vector unit (the rest one by
      // one): 3072 x 96 int8 products ran at 4 elements/ns with a 32-element remainder done element by element.
      int done = blocks * B;
      if constexpr (f == WeightFormat::Int8 && Int8Loader<Arch>::order == 1) {
        for (; done + V <= q.K; done += V) {
          const F wv = Int8Loader<Arch>::load1(row + done);
          for (int m = 0; m < MR; ++m)
            acc[m][0] = gemm_madd(F::load_unaligned(q.A + static_cast<size_t>(m) * q.lda + done), wv, acc[m][0]);
        }
      }
      for (int m = 0; m < MR; ++m) {
        F sum = acc[m][0];
        for (int u = 1; u < U; ++u) sum += acc[m][u];
        float c = xsimd::hadd(sum);
        if constexpr (f == WeightFormat::Int8) {
          if (done) c *= s[0];  // K = 0 comes with no scales
        }
        const float* a = q.A + static_cast<size_t>(m) * q.lda;
        for (int k = done; k < q.K; ++k) c += a[k] * ops::dequantize_element(f, row, s, k);
        q.C[static_cast<size_t>(m) * q.ldc + n] = c;
      }
    }
  }

  template <WeightFormat f>
  static void rows_any(const QuantRows& q, int n0, int n1) {
    switch (q.M) {
      case 1: return rows<f, 1>(q, n0, n1);
      case 2: return rows<f, 2>(q, n0, n1);
      case 3: return rows<f, 3>(q, n0, n1);
      default: return rows<f, 4>(q, n0, n1);
    }
  }
  static void rows_fn(const QuantRows& q, int n0, int n1) {
    switch (q.f) {
      case WeightFormat::F16: return rows_any<WeightFormat::F16>(q, n0, n1);
      case WeightFormat::BF16: return rows_any<WeightFormat::BF16>(q, n0, n1);
      case WeightFormat::Int8: return rows_any<WeightFormat::Int8>(q, n0, n1);
      case WeightFormat::Q4: return rows_any<WeightFormat::Q4>(q, n0, n1);
      case WeightFormat::F32: return;
    }
  }

  // A block's R vectors (vector t, lane i: element R i + t) put in natural order by log2 R rounds of the same
  // perfect shuffle, vector j zipped with vector j + R/2 into vectors 2j and 2j + 1: after round r each vector holds
  // runs of 2^r consecutive elements (for R = 2 one round, the zip itself).
  template <int Rf>
  static void to_natural(F* w) {
    for (int run = 1; run < Rf; run *= 2) {
      F n[Rf];
      for (int j = 0; j < Rf / 2; ++j) Zip<Arch>::zip(w[j], w[j + Rf / 2], n[2 * j], n[2 * j + 1]);
      for (int j = 0; j < Rf; ++j) w[j] = n[j];
    }
  }

  // A row dequantized in natural order (the gemm path's panels, multiplied with A as it is): the blocks come out of
  // the loaders in block order and are interleaved in registers, 1 - 3 shuffle rounds per block, instead of
  // reordering every row of A (a copy of A) or the row in memory afterwards (element by element, which cost as
  // much as the product itself at 32 rows of A).
  template <WeightFormat f>
  static void dequantize(const uint8_t* row, const float* s, int K, float* out) {
    if constexpr (f == WeightFormat::Q4 && Q4Loader<Arch>::kLookup) {
      const int groups = K / 32;
      for (int g = 0; g < groups; ++g) {
        F w[2];
        Q4Loader<Arch>::group(row + static_cast<size_t>(g) * 16, ops::q4_scale(s, g), w);
        w[0].store_unaligned(out + static_cast<size_t>(g) * 32);
        w[1].store_unaligned(out + static_cast<size_t>(g) * 32 + V);
      }
      for (int k = groups * 32; k < K; ++k) out[k] = ops::dequantize_element(f, row, s, k);
      return;
    }
    constexpr int Rf = R<f>, B = Rf * V;
    const int blocks = K / B;
    const GroupLanes lanes;
    for (int b = 0; b < blocks; ++b) {
      F w[Rf];
      block<f>(row + static_cast<size_t>(b) * block_bytes<f>, s, b * B / 32, lanes, w);
      if constexpr (f == WeightFormat::Int8)
        for (int t = 0; t < Rf; ++t) w[t] *= F(s[0]);
      if constexpr (order_of < f >> 1) to_natural<Rf>(w);
      for (int t = 0; t < Rf; ++t) w[t].store_unaligned(out + static_cast<size_t>(b) * B + t * V);
    }
    for (int k = blocks * B; k < K; ++k) out[k] = ops::dequantize_element(f, row, s, k);
  }
  static void dequantize_fn(WeightFormat f, const uint8_t* row, const float* s, int K, float* out) {
    switch (f) {
      case WeightFormat::F16: return dequantize<WeightFormat::F16>(row, s, K, out);
      case WeightFormat::BF16: return dequantize<WeightFormat::BF16>(row, s, K, out);
      case WeightFormat::Int8: return dequantize<WeightFormat::Int8>(row, s, K, out);
      case WeightFormat::Q4: return dequantize<WeightFormat::Q4>(row, s, K, out);
      case WeightFormat::F32: return;
    }
  }
};

}  // namespace quant_detail

template <class Arch>
QuantKernels quant_kernels() {
  using S = quant_detail::Simd<Arch>;
  return {S::V,
          {1, quant_detail::HalfLoader<Arch>::order, 2, quant_detail::Int8Loader<Arch>::order,
           quant_detail::Q4Loader<Arch>::order},
          &S::rows_fn,
          &S::dequantize_fn};
}

}  // namespace qkv::kernels
