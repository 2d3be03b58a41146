#pragma once
// The storage formats of quantized weights, one definition for the host and every device (the CPU kernels, the
// CUDA kernels, the quantizer, the files), so that an element dequantizes to the same float everywhere: every
// executor's quantized product is then the fp32 product of the same dequantized matrix, up to summation order.
// Only <cstdint>/<cstddef>: nvcc compiles it into device code.
//
// A weight matrix W is (N rows, K columns) as torch.nn.Linear stores it (out, in). Its packed storage: row n starts
// at byte n * row_stride(format, K), rows padded to a multiple of 4 bytes, so that every row (and so any row
// offset: attention's k/v rows of in_proj, the embedding's gathered rows) is u32-aligned for WGSL and CUDA.
//
//   format  row_stride(K)        element k of row n                                     scale words per row
//   F16     round_up(2K, 4)      IEEE half at byte 2k, little-endian                    0
//   BF16    round_up(2K, 4)      bfloat16 (the high half of the fp32) at byte 2k        0
//   Int8    round_up(K, 4)       int8 q at byte k: w = q * scale[n] (an fp32 scale)     1
//   Q4      16 * G, G=ceil(K/32) group g = k/32: byte g*16 + (k%32)/2, the low nibble    ceil(G / 2)
//                                for even k%32, the high one for odd: w = (q - 8) * d_g
//
// A row's scales are 32-bit words at scales + n * scales_per_row(f, K) (the `const float* scales` of every
// quantized op): Int8's one word is an fp32 scale; Q4's words hold its G group scales d_g as bfloat16, two to a
// word, d_g at byte 2g of the row's words (the low half of word g / 2 for even g, little-endian), a last padding
// half 0 when G is odd (q4_scale reads them). 18 bytes per 32 weights (4.5 bits a weight, llama.cpp Q4_0's size)
// where fp32 scales made 20 (5 bits), so GPT-2's q4 weights are ~6.8x smaller than fp32, not 6.2x. bfloat16 rather
// than Q4_0's IEEE half: a bfloat16 is the top of a float, so a scale converts with one shift (the wasm core's
// decoding is bound by its instructions: halves cost its q4 decode 7-9%, bfloat16 0-3%), with fp32's range (no scale
// overflows or is subnormal where the fp32 one is not); its 8 significant bits move a weight by at most 2^-9 of
// itself beside the 4-bit code's step (the codes are computed with the scale stored).
//
// Q4 is ONNX Runtime MatMulNBits' 4-bit layout (nibble order, groups of 32 along K, symmetric with the implicit
// zero point 8) with llama.cpp's Q4_0 scale rule and bfloat16 scales: ORT's layout because it is the one the web
// peers' int4 models ship in, Q4_0's rule because its scale maps the group's largest magnitude to -8 exactly,
// using the one code the symmetric range has past -7 (ops/weight_quantize.h has the quantizer's rules).
// Padding bytes are 0 (F16, BF16, Int8) or code 8, i.e. 0 (Q4), so a padded element dequantizes to 0.
#include <cstddef>
#include <cstdint>

#if !defined(QKV_HOST_DEVICE)
#if defined(__CUDACC__)
#define QKV_HOST_DEVICE __host__ __device__
#else
#define QKV_HOST_DEVICE
#endif
#endif

namespace qkv::ops {

enum class WeightFormat : int { F32 = 0, F16 = 1, BF16 = 2, Int8 = 3, Q4 = 4 };

// Elements per Q4 group (along K), each with its own scale.
constexpr int group_size = 32;

// Bytes from one row's start to the next's.
QKV_HOST_DEVICE constexpr size_t row_stride(WeightFormat f, int K) {
  const size_t k = K > 0 ? static_cast<size_t>(K) : 0;
  switch (f) {
    case WeightFormat::F32: return 4 * k;
    case WeightFormat::F16:
    case WeightFormat::BF16: return (2 * k + 3) / 4 * 4;
    case WeightFormat::Int8: return (k + 3) / 4 * 4;
    case WeightFormat::Q4: return 16 * ((k + group_size - 1) / group_size);
  }
  return 0;
}

// Q4 groups per row of K elements (each with its bfloat16 scale).
QKV_HOST_DEVICE constexpr int q4_groups(int K) { return K > 0 ? (K + group_size - 1) / group_size : 0; }

// 32-bit scale words per row (row n's at scales + n * scales_per_row): Int8 one fp32, Q4 two bfloat16 a word.
QKV_HOST_DEVICE constexpr int scales_per_row(WeightFormat f, int K) {
  if (f == WeightFormat::Int8) return 1;
  if (f == WeightFormat::Q4) return (q4_groups(K) + 1) / 2;
  return 0;
}

// Whether an op's `int format` argument names a packed format (F32 is gemm's, not a quantized op's).
QKV_HOST_DEVICE constexpr bool is_packed_format(int f) { return f >= 1 && f <= 4; }

// The 4 bytes of x read as a To: std::bit_cast for float <-> uint32_t, which neither nvcc's device code nor
// Emscripten's libc++ (clang 14) has. A 4-byte copy compiles to a register move on every target.
template <class To, class From>
QKV_HOST_DEVICE inline To bits_as(From x) {
  static_assert(sizeof(To) == sizeof(From), "bits_as: the two types must have the same size");
  To y;
  __builtin_memcpy(&y, &x, sizeof y);
  return y;
}
QKV_HOST_DEVICE inline uint32_t float_bits(float f) { return bits_as<uint32_t>(f); }
QKV_HOST_DEVICE inline float bits_float(uint32_t u) { return bits_as<float>(u); }

// IEEE binary16 -> binary32 (exact: every half is a float). Subnormal halves m * 2^-24 are normal floats.
QKV_HOST_DEVICE inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | m << 13);  // inf, NaN (payload kept)
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_float(sign | (e + 112) << 23 | m << 13);  // rebias 15 -> 127
}

// binary32 -> binary16, round to nearest even; past the largest half (65504, and from 65520 on) it is inf, below
// 2^-14 a subnormal (or 0), NaN a quiet NaN.
QKV_HOST_DEVICE inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | (a >> 13 & 0x3ffu));
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536 (and inf)
  // Below 2^-14: a subnormal half q * 2^-24 with q = round(|f| * 2^24), |f| = m * 2^(e - 150); below 2^-25 it is 0.
  if (a < 0x38800000u) {
    const uint32_t e = a >> 23;
    if (e < 102) return static_cast<uint16_t>(sign);
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    const uint32_t q = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (q + (rest > half || (rest == half && (q & 1u)))));
  }
  // Normal: rebias 127 -> 15 and drop 13 mantissa bits, ties to even (a carry into the exponent is right, and
  // into 0x7c00 gives inf for 65520 <= |f| < 65536).
  const uint32_t r = a - 0x38000000u;
  return static_cast<uint16_t>(sign | (r + 0xfffu + (r >> 13 & 1u)) >> 13);
}

QKV_HOST_DEVICE inline float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
// binary32 -> bfloat16, round to nearest even (overflow to inf as RNE gives it); NaN a quiet NaN.
QKV_HOST_DEVICE inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(x >> 16 | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + (x >> 16 & 1u)) >> 16);
}

// Q4's bfloat16 scale of group g of a row whose scale words start at row_scales: its bits, and as an fp32 (exact).
QKV_HOST_DEVICE inline uint16_t q4_scale_bits(const float* row_scales, int g) {
  uint16_t h;
  __builtin_memcpy(&h, reinterpret_cast<const unsigned char*>(row_scales) + 2 * static_cast<size_t>(g), sizeof h);
  return h;
}
QKV_HOST_DEVICE inline float q4_scale(const float* row_scales, int g) {
  return bf16_to_f32(q4_scale_bits(row_scales, g));
}

// Element k of a packed row: `row` points at its first byte, `row_scales` at its scales_per_row scale words (may be
// null for F32, F16 and BF16). The one formula of every dequantization: (float)q * scale, one rounding.
QKV_HOST_DEVICE inline float dequantize_element(WeightFormat f, const uint8_t* row, const float* row_scales, int k) {
  switch (f) {
    case WeightFormat::F32:
      return bits_float(row[4 * k] | row[4 * k + 1] << 8 | row[4 * k + 2] << 16 |
                        static_cast<uint32_t>(row[4 * k + 3]) << 24);
    case WeightFormat::F16: return f16_to_f32(static_cast<uint16_t>(row[2 * k] | row[2 * k + 1] << 8));
    case WeightFormat::BF16: return bf16_to_f32(static_cast<uint16_t>(row[2 * k] | row[2 * k + 1] << 8));
    case WeightFormat::Int8: return static_cast<float>(static_cast<int8_t>(row[k])) * row_scales[0];
    case WeightFormat::Q4: {
      const int g = k / group_size, j = k % group_size;
      const uint8_t b = row[g * 16 + j / 2];
      const int q = (j & 1) ? b >> 4 : b & 0xf;
      return static_cast<float>(q - 8) * q4_scale(row_scales, g);
    }
  }
  return 0.f;
}

}  // namespace qkv::ops
