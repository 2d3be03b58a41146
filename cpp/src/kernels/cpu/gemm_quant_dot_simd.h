#pragma once
// The vector body of the int8-activation product (gemm_quant_dot.h has the numbers), one template over a small
// trait of integer vector operations: included by kernels/cpu/arch/sse41.cpp (SSE4.1, and SIMD128 in the
// WebAssembly build) and arch/avx2.cpp, each with its trait.
//
// A trait T has E int16 lanes per vector (I), a float vector F of E / 2 lanes, and, for int8 weights (rows_int8),
//   T::load16(p)       E int16 activations
//   T::int8(p)         E int8 codes at p, sign-extended to int16
//   T::madd(a, b)      E / 2 int32 lanes, lane i = a[2i] b[2i] + a[2i+1] b[2i+1] (pmaddwd, i32x4.dot_i16x8_s)
//   T::add(a, b)       int32 lanes added
//   T::scale(s, x, acc)  acc + float(s) * x
//   T::zero(), T::hsum(F)
// and for Q4 (rows_q4_fours, below)
//     T::q4_codes(p)        a block's 16 bytes as the trait keeps its codes, unsigned (0..15)
//     T::Act, T::q4_act(a)  the activations the trait multiplies (Int8Rows' q or q8): their type and first block
//     T::q4_sum(w, x)       int32 lanes summing to sum c q for the block of activations at x (no offset)
//     T::reduce2(x, y), T::combine2(p, q)  two blocks' lanes half reduced; two such pairs -> one vector of their
//                           four sums (p's blocks in lanes 0 and 1)
//     T::scales4(s16, d)    the float products s[b + j] d[m, b + j] of four blocks (bfloat16 s, float d)
//     T::sub(x, y), T::load4(p), T::lane0(x)  int32 lanes: x - y, four int32 at p, x in lane 0 and zeros
//     T::scale4(x, s, acc)  acc + float(x) * s, lane by lane
// (a vector wider than four int32 lanes keeps the four sums in its lanes 0..3, the other lanes 0).
#include <algorithm>

#include "kernels/cpu/gemm_quant_dot.h"
#include "kernels/cpu/gemm_quant_kernel.h"

namespace qkv::kernels::dot_detail {

// Q4, four blocks at a time. Each block's products are summed into int32 lanes with the
// codes as unsigned 0..15 (no recentring: the offset is 8 x the block's activation sum, Int8Rows::zsum, taken off
// once per four blocks), four blocks' lanes are reduced into one vector of their four sums, and only that vector is
// converted and scaled by s d: per block, a quarter of the convert, multiply and add, and no scalar scale made and
// splat. Blocks past the last four go one by one. The block order of the sums is that of the one-block loop, so only
// the float additions differ in order from the reference.
template <class T, int MR>
void rows_q4_fours(const QuantDotRows& q, int n0, int n1) {
  using I = typename T::I;
  using F = typename T::F;
  using Act = typename T::Act;
  const int nb = q.a.nb, whole = nb / 4 * 4;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    const float* s = q.scales + static_cast<size_t>(n) * q.spr;
    const uint16_t* s16 = reinterpret_cast<const uint16_t*>(s);  // block b's bfloat16 scale at s16[b]
    // The codes and each row's activations are walked by pointers that step a block at a time: under V8, indices
    // scaled into addresses cost two shifts and two adds a block.
    const uint8_t* w = row;
    const Act* x[MR];
    F acc[MR];
    for (int m = 0; m < MR; ++m) {
      x[m] = T::q4_act(q.a) + static_cast<size_t>(m) * nb * kDotBlock;
      acc[m] = T::zero();
    }
    for (int b = 0; b < whole; b += 4) {
      I v[MR][2];
      // Two blocks a pass, their lanes half reduced at once. Not unrolled: clang then loads all four blocks' codes
      // and activations first, which V8's 16 registers cannot hold (the spills made the GPT-2 decode 10% slower).
#ifdef __clang__
#pragma clang loop unroll(disable)
#endif
      for (int j = 0; j < 2; ++j, w += 32) {
        const auto c0 = T::q4_codes(w), c1 = T::q4_codes(w + 16);
        for (int m = 0; m < MR; ++m) {
          v[m][j] = T::reduce2(T::q4_sum(c0, x[m]), T::q4_sum(c1, x[m] + kDotBlock));
          x[m] += 2 * kDotBlock;
        }
      }
      for (int m = 0; m < MR; ++m) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        const I sums = T::sub(T::combine2(v[m][0], v[m][1]), T::load4(q.a.zsum + block));
        acc[m] = T::scale4(sums, T::scales4(s16 + b, q.a.d + block), acc[m]);
      }
    }
    for (int b = whole; b < nb; ++b, w += 16) {
      const auto codes = T::q4_codes(w);
      for (int m = 0; m < MR; ++m) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        const I sum = T::sub(T::q4_sum(codes, x[m]), T::lane0(q.a.zsum[block]));
        x[m] += kDotBlock;
        acc[m] = T::scale(ops::q4_scale(s, b) * q.a.d[block], sum, acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) q.C[static_cast<size_t>(m) * q.ldc + n] = T::hsum(acc[m]);
  }
}

// Int8, one block at a time.
template <class T, int MR>
void rows_int8(const QuantDotRows& q, int n0, int n1) {
  using I = typename T::I;
  using F = typename T::F;
  constexpr int E = T::E, P = kDotBlock / E;  // vectors per block
  const int nb = q.a.nb;
  // Int8 rows hold K bytes (padded to 4): the last block, when partial, is summed in scalar code.
  const int whole = q.a.K / kDotBlock;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    const float* s = q.scales + static_cast<size_t>(n) * q.spr;  // the row's one fp32 scale
    F acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = T::zero();
    for (int b = 0; b < whole; ++b) {
      I w[P];
      for (int p = 0; p < P; ++p) w[p] = T::int8(row + b * kDotBlock + p * E);
      for (int m = 0; m < MR; ++m) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        const int16_t* a = q.a.q + block * kDotBlock;
        I sum = T::madd(w[0], T::load16(a));
        for (int p = 1; p < P; ++p) sum = T::add(sum, T::madd(w[p], T::load16(a + p * E)));
        acc[m] = T::scale(q.a.d[block], sum, acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) {
      float c = T::hsum(acc[m]);
      if (whole < nb) {  // the partial last block
        const size_t block = static_cast<size_t>(m) * nb + whole;
        const int16_t* a = q.a.q + block * kDotBlock;
        int32_t sum = 0;
        for (int k = whole * kDotBlock; k < q.a.K; ++k) sum += static_cast<int8_t>(row[k]) * a[k - whole * kDotBlock];
        c += static_cast<float>(sum) * q.a.d[block];
      }
      q.C[static_cast<size_t>(m) * q.ldc + n] = c * s[0];
    }
  }
}

template <class T>
void rows_fn(const QuantDotRows& q, int n0, int n1) {
  const bool i8 = q.f == WeightFormat::Int8;
  switch (q.a.M) {
    case 1: return i8 ? rows_int8<T, 1>(q, n0, n1) : rows_q4_fours<T, 1>(q, n0, n1);
    case 2: return i8 ? rows_int8<T, 2>(q, n0, n1) : rows_q4_fours<T, 2>(q, n0, n1);
    case 3: return i8 ? rows_int8<T, 3>(q, n0, n1) : rows_q4_fours<T, 3>(q, n0, n1);
    default: return i8 ? rows_int8<T, 4>(q, n0, n1) : rows_q4_fours<T, 4>(q, n0, n1);
  }
}

}  // namespace qkv::kernels::dot_detail
