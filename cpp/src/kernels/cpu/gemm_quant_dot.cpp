// The int8-activation product's activation quantizer, its scalar kernel and its naive oracle (gemm_quant_dot.h has
// the numbers; gemm_quant.cpp calls them for gemm_quant's int8_act).
#include "kernels/cpu/gemm_quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace qkv::kernels {

namespace {

// std::nearbyint's result in the default rounding mode (to nearest, ties to even) for |x| <= 2^22, without its call:
// adding 1.5 x 2^23 leaves no bits below the units, so the sum is x rounded to an integer, exactly as nearbyint
// rounds it, and the subtraction is exact. (Here |x| <= 127 and a little: a / max |a| x 127.) The library call per
// element was 4% of GPT-2 124M's q4a8 decode on one thread (perf), the quantizer running on the calling thread while
// the others wait.
inline float round_half_even(float x) {
  constexpr float kShift = 12582912.f;  // 1.5 x 2^23
  return (x + kShift) - kShift;
}

}  // namespace

void quantize_activations(const float* A, int lda, int M, int K, WeightFormat f, int16_t* q, float* d, int8_t* q8,
                          int32_t* zsum) {
  const int nb = (K + kDotBlock - 1) / kDotBlock;
  const bool q4 = f == WeightFormat::Q4;
  const int32_t z = q4 ? 8 : 128;
  // Each loop below is branch-free over a block, so that the compilers vectorize it (the activations are quantized on
  // the calling thread while the pool's workers wait: written element by element, with an index made per element,
  // this was 7% of the calling thread's time in GPT-2 124M's q4a8 decode natively).
  auto code = [](float v) { return static_cast<int16_t>(std::clamp(round_half_even(v), -127.f, 127.f)); };
  for (int m = 0; m < M; ++m) {
    const float* a = A + static_cast<size_t>(m) * lda;
    for (int b = 0; b < nb; ++b) {
      const int k0 = b * kDotBlock, len = std::min(kDotBlock, K - k0);
      const float* x = a + k0;
      const size_t at = static_cast<size_t>(m) * nb + b;
      int16_t* qb = q + at * kDotBlock;
      // max |a| as the largest of the magnitudes' bit patterns (for floats >= 0 their order as integers; an integer
      // maximum vectorizes, a float one does not without fast-math), and a NaN or an infinity among them (patterns
      // from 0x7f800000 on: the largest is one).
      uint32_t top = 0;
      for (int i = 0; i < len; ++i) top = std::max(top, ops::float_bits(x[i]) & 0x7fffffffu);
      const bool bad = top >= 0x7f800000u;
      const float amax = ops::bits_float(top);
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      d[at] = bad ? std::nanf("") : amax / 127.f;
      if (bad) {
        std::fill(qb, qb + kDotBlock, int16_t{0});
      } else if (len == kDotBlock && q4) {  // the nibbles' order: element 2j at j, element 2j + 1 at 16 + j
        for (int j = 0; j < kDotBlock / 2; ++j) {
          qb[j] = code(x[2 * j] * inv);
          qb[kDotBlock / 2 + j] = code(x[2 * j + 1] * inv);
        }
      } else if (len == kDotBlock) {
        for (int i = 0; i < kDotBlock; ++i) qb[i] = code(x[i] * inv);
      } else {  // the last, partial block: zeros past K
        std::fill(qb, qb + kDotBlock, int16_t{0});
        for (int i = 0; i < len; ++i) qb[q4 ? (i % 2) * (kDotBlock / 2) + i / 2 : i] = code(x[i] * inv);
      }
      if (q8)
        for (int i = 0; i < kDotBlock; ++i) q8[at * kDotBlock + i] = static_cast<int8_t>(qb[i]);
      if (zsum) {
        int32_t sum = 0;
        for (int i = 0; i < kDotBlock; ++i) sum += qb[i];
        zsum[at] = z * sum;
      }
    }
  }
}

namespace {

// The integer sum of block b of W's row (codes, q4 less 8) with the quantized activations' block in f's order.
int32_t block_sum(WeightFormat f, const uint8_t* row, int K, int b, const int16_t* a) {
  int32_t sum = 0;
  const int k0 = b * kDotBlock, len = std::min(kDotBlock, K - k0);
  for (int i = 0; i < len; ++i) {
    const int k = k0 + i;
    if (f == WeightFormat::Int8) {
      sum += static_cast<int8_t>(row[k]) * a[i];
    } else {
      const uint8_t byte = row[k / 2];
      const int code = (k % 2 ? byte >> 4 : byte & 0xf) - 8;
      sum += code * a[(i % 2) * (kDotBlock / 2) + i / 2];
    }
  }
  return sum;
}

}  // namespace

void quant_dot_rows_scalar(const QuantDotRows& q, int n0, int n1) {
  const int nb = q.a.nb;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = q.W + static_cast<size_t>(n) * q.stride;
    const float* s = q.scales + static_cast<size_t>(n) * q.spr;
    for (int m = 0; m < q.a.M; ++m) {
      float c = 0.f;
      for (int b = 0; b < nb; ++b) {
        const size_t block = static_cast<size_t>(m) * nb + b;
        const float scale = q.f == WeightFormat::Int8 ? q.a.d[block] : ops::q4_scale(s, b) * q.a.d[block];
        c += static_cast<float>(block_sum(q.f, row, q.a.K, b, q.a.q + block * kDotBlock)) * scale;
      }
      if (q.f == WeightFormat::Int8) c *= s[0];
      q.C[static_cast<size_t>(m) * q.ldc + n] = c;
    }
  }
}

void gemm_quant_int8_act_reference(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W,
                                   const float* scales, float* C, int ldc) {
  const int nb = (K + kDotBlock - 1) / kDotBlock;
  std::vector<int16_t> q(static_cast<size_t>(M) * nb * kDotBlock);
  std::vector<float> d(static_cast<size_t>(M) * nb);
  quantize_activations(A, lda, M, K, f, q.data(), d.data());
  const QuantDotRows rows{f,      {M, K, nb, q.data(), d.data()}, W, ops::row_stride(f, K),
                          scales, ops::scales_per_row(f, K),      C, ldc};
  quant_dot_rows_scalar(rows, 0, N);
}

}  // namespace qkv::kernels
