// The int8-activation product's activation quantizer, its scalar kernel and its naive oracle (gemm_quant_dot.h has
// the numbers; gemm_quant.cpp calls them for gemm_quant's int8_act).
#include "kernels/cpu/gemm_quant_dot.h"

#include <cmath>
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
  for (int m = 0; m < M; ++m) {
    const float* a = A + static_cast<size_t>(m) * lda;
    for (int b = 0; b < nb; ++b) {
      const int k0 = b * kDotBlock, len = std::min(kDotBlock, K - k0);
      float amax = 0.f;
      for (int i = 0; i < len; ++i) amax = std::max(amax, std::fabs(a[k0 + i]));
      for (int i = 0; i < len; ++i)  // a NaN escapes std::max: look for it
        if (std::isnan(a[k0 + i])) amax = a[k0 + i];
      int16_t* qb = q + (static_cast<size_t>(m) * nb + b) * kDotBlock;
      float& db = d[static_cast<size_t>(m) * nb + b];
      std::fill(qb, qb + kDotBlock, int16_t{0});
      if (!std::isfinite(amax)) {
        db = std::nanf("");
        continue;
      }
      db = amax / 127.f;
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      for (int i = 0; i < len; ++i) {
        // Q4 blocks in the nibbles' order: element 2j at j, element 2j + 1 at 16 + j.
        const int at = f == WeightFormat::Q4 ? (i % 2) * (kDotBlock / 2) + i / 2 : i;
        qb[at] = static_cast<int16_t>(std::clamp(round_half_even(a[k0 + i] * inv), -127.f, 127.f));
      }
    }
  }
  const size_t blocks = static_cast<size_t>(M) * nb;
  if (q8)
    for (size_t i = 0; i < blocks * kDotBlock; ++i) q8[i] = static_cast<int8_t>(q[i]);
  if (zsum)
    for (size_t b = 0; b < blocks; ++b) {
      int32_t s = 0;
      for (int i = 0; i < kDotBlock; ++i) s += q[b * kDotBlock + i];
      zsum[b] = (f == WeightFormat::Q4 ? 8 : 128) * s;
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
