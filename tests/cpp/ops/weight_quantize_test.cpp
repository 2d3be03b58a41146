// The weight formats (ops/weight_format.h) and the quantizer (ops/weight_quantize.h): exact codes on hand-made
// rows (ties to even, all-zero rows and groups, K not a multiple of 4 or of the group, the largest magnitude's
// sign, Q4's nibble order), the half-precision conversions against an independent oracle (a search over every
// half, in double) including subnormals, overflow, inf and NaN, and the argument checks of the quantized ops on
// every executor. The ops' values against the reference: ops/backend_check.cpp's "quant" group
// (backend_ops_test.cpp).
#include "ops/weight_quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/ops.h"
#include "ops/webgpu_loopback.h"
#include "test_util.h"

namespace qkv::weight_quantize_test {
namespace {

using ops::WeightFormat;

float f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t half_at(const std::vector<uint8_t>& b, size_t i) {
  return static_cast<uint16_t>(b[2 * i] | b[2 * i + 1] << 8);
}

TEST(WeightFormat, RowStridesAndScalesPerRowFollowTheTable) {
  EXPECT_EQ(ops::row_stride(WeightFormat::F16, 1), 4u);
  EXPECT_EQ(ops::row_stride(WeightFormat::F16, 2), 4u);
  EXPECT_EQ(ops::row_stride(WeightFormat::BF16, 3), 8u);
  EXPECT_EQ(ops::row_stride(WeightFormat::Int8, 5), 8u);
  EXPECT_EQ(ops::row_stride(WeightFormat::Int8, 768), 768u);
  EXPECT_EQ(ops::row_stride(WeightFormat::Q4, 1), 16u);
  EXPECT_EQ(ops::row_stride(WeightFormat::Q4, 32), 16u);
  EXPECT_EQ(ops::row_stride(WeightFormat::Q4, 33), 32u);
  EXPECT_EQ(ops::row_stride(WeightFormat::Q4, 768), 384u);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::F16, 100), 0);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::BF16, 100), 0);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::Int8, 100), 1);
  // Q4: 32-bit words of two half scales each: ceil(ceil(K / 32) / 2).
  EXPECT_EQ(ops::q4_groups(100), 4);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::Q4, 100), 2);
  EXPECT_EQ(ops::q4_groups(65), 3);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::Q4, 65), 2);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::Q4, 1), 1);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::Q4, 0), 0);
  EXPECT_EQ(ops::scales_per_row(WeightFormat::Q4, 768), 12);
  EXPECT_EQ(ops::packed_bytes(WeightFormat::Q4, 50257, 768), size_t{50257} * 384);
}

// The nearest half of a finite x by search over the positive halves (sorted by value as by code), ties to the
// even code, in double: an oracle that shares nothing with f32_to_f16's bit manipulation.
uint16_t nearest_half(float x) {
  const double a = std::abs(static_cast<double>(x));
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (a >= 65520.0) return sign | 0x7c00;
  int lo = 0, hi = 0x7bff;  // the largest code with value <= a
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (static_cast<double>(ops::f16_to_f32(static_cast<uint16_t>(mid))) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == 0x7bff) return sign | 0x7bff;
  const double below = ops::f16_to_f32(static_cast<uint16_t>(lo)),
               above = ops::f16_to_f32(static_cast<uint16_t>(lo + 1));
  const int code = a - below < above - a ? lo : a - below > above - a ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>(sign | code);
}

TEST(WeightFormat, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = ops::f16_to_f32(static_cast<uint16_t>(h));
    const uint32_t e = h >> 10 & 0x1f, m = h & 0x3ff;
    const double want =
        e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
    if (e == 0x1f) {
      EXPECT_EQ(std::isnan(f), m != 0) << h;
      if (m == 0) {
        EXPECT_TRUE(std::isinf(f)) << h;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), (h & 0x8000) ? -want : want) << "half " << h;
    ASSERT_EQ(ops::f32_to_f16(f), h) << "half " << h << " does not round-trip";
  }
}

TEST(WeightFormat, FloatToHalfRoundsToNearestEven) {
  // Hand-made: ties between neighbours go to the even code; subnormals; overflow to inf from 65520 on.
  EXPECT_EQ(ops::f32_to_f16(1.f), 0x3c00);
  EXPECT_EQ(ops::f32_to_f16(-2.f), 0xc000);
  EXPECT_EQ(ops::f32_to_f16(1.f + std::ldexp(1.f, -11)), 0x3c00);      // tie: 1 (even) over 1 + 2^-10
  EXPECT_EQ(ops::f32_to_f16(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02);  // tie: 1 + 2^-9 (even) over 1 + 2^-10
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(1.f, -24)), 0x0001);            // the smallest subnormal
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(1.f, -25)), 0x0000);            // tie: 0 (even)
  EXPECT_EQ(ops::f32_to_f16(-std::ldexp(1.f, -25)), 0x8000);           // -0 keeps its sign
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(3.f, -25)), 0x0002);     // tie: 2 (even) over 1
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(1023.f, -24)), 0x03ff);  // the largest subnormal
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(2047.f, -25)), 0x0400);  // tie rounds up into the normals
  EXPECT_EQ(ops::f32_to_f16(std::ldexp(1.f, -14)), 0x0400);
  EXPECT_EQ(ops::f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(ops::f32_to_f16(f32(0x00000001)), 0x0000);  // a float subnormal
  EXPECT_EQ(ops::f32_to_f16(65504.f), 0x7bff);
  EXPECT_EQ(ops::f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(ops::f32_to_f16(65520.f), 0x7c00);
  EXPECT_EQ(ops::f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(ops::f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = ops::f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  EXPECT_TRUE(std::isnan(ops::f16_to_f32(ops::f32_to_f16(f32(0x7f800001)))));  // a signalling NaN stays NaN
  // Against the search oracle, over every exponent a half can reach and past it, mantissas at random.
  Rng rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t e = 90 + static_cast<uint32_t>(rng.uniform() * 56);  // 2^-37 .. 2^18
    const uint32_t bits = (i & 1) << 31 | e << 23 | (static_cast<uint32_t>(rng.uniform() * 8388608.0) & 0x7fffff);
    const float x = f32(bits);
    ASSERT_EQ(ops::f32_to_f16(x), nearest_half(x)) << "x = " << x << " (bits " << bits << ")";
  }
}

TEST(WeightFormat, FloatToBfloat16RoundsToNearestEven) {
  EXPECT_EQ(ops::f32_to_bf16(1.f), 0x3f80);
  EXPECT_EQ(ops::f32_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3f80);      // tie: even
  EXPECT_EQ(ops::f32_to_bf16(1.f + 3 * std::ldexp(1.f, -8)), 0x3f82);  // tie: even, upward
  EXPECT_EQ(ops::f32_to_bf16(1.f + std::ldexp(1.f, -9)), 0x3f80);
  EXPECT_EQ(ops::f32_to_bf16(-1.f - std::ldexp(5.f, -9)), 0xbf81);
  EXPECT_EQ(ops::f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest: inf
  EXPECT_EQ(ops::f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(ops::f32_to_bf16(f32(0x00018000)), 0x0002);  // a float subnormal: its tie goes to the even code
  EXPECT_EQ(ops::f32_to_bf16(f32(0x00008000)), 0x0000);
  EXPECT_TRUE(std::isnan(ops::bf16_to_f32(ops::f32_to_bf16(f32(0x7f800001)))));
  EXPECT_EQ(ops::bf16_to_f32(0x3f81), 1.f + std::ldexp(1.f, -7));
  // Against double arithmetic: the nearest of the two neighbours, the even one on a tie.
  Rng rng(6);
  for (int i = 0; i < 100000; ++i) {
    const float x = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.uniform() * 200) - 100));
    const uint32_t b = ops::float_bits(x);
    const uint16_t lo = static_cast<uint16_t>(b >> 16), hi = static_cast<uint16_t>(lo + 1);
    const double dl = std::abs(x - static_cast<double>(ops::bf16_to_f32(lo))),
                 dh = std::abs(static_cast<double>(ops::bf16_to_f32(hi)) - x);
    const uint16_t want = dl < dh ? lo : dl > dh ? hi : (lo % 2 == 0 ? lo : hi);
    ASSERT_EQ(ops::f32_to_bf16(x), want) << x;
  }
}

TEST(WeightQuantize, HalfFormatsStoreEachElementLittleEndianWithZeroPadding) {
  const std::vector<float> w = {1.f, -2.f, 65504.f, 1e-5f, 0.1f};  // K = 5: 10 bytes, padded to 12
  for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16}) {
    std::vector<uint8_t> p(ops::packed_bytes(f, 1, 5), 0xee);
    ops::quantize_rows(f, w.data(), 1, 5, p.data(), nullptr);
    ASSERT_EQ(p.size(), 12u);
    for (size_t k = 0; k < w.size(); ++k)
      EXPECT_EQ(half_at(p, k), f == WeightFormat::F16 ? ops::f32_to_f16(w[k]) : ops::f32_to_bf16(w[k])) << k;
    EXPECT_EQ(p[10], 0);
    EXPECT_EQ(p[11], 0);
  }
  std::vector<uint8_t> p(ops::packed_bytes(WeightFormat::F16, 1, 5));
  ops::quantize_rows(WeightFormat::F16, w.data(), 1, 5, p.data(), nullptr);
  EXPECT_EQ(p[0], 0x00);  // 1.0 = 0x3c00, low byte first
  EXPECT_EQ(p[1], 0x3c);
  EXPECT_EQ(half_at(p, 3), 0x00a8);  // 1e-5 rounds to the subnormal 168 * 2^-24
}

TEST(WeightQuantize, Int8ScalesByTheLargestMagnitudeAndRoundsTiesToEven) {
  // Row 0: max |w| = 127 * 2^-7, so the scale is 2^-7 and every w / scale below is exact (ties included).
  const float u = std::ldexp(1.f, -7);
  const int K = 7;  // not a multiple of 4: one padding byte
  const std::vector<float> w = {-127 * u, 2.5f * u, 3.5f * u, -2.5f * u, 0.5f * u, 1.5f * u, 0.f,  // row 0
                                0.f,      0.f,      0.f,      0.f,       0.f,      0.f,      0.f,  // row 1: all zero
                                1.f,      -1.f,     0.25f,    0.5f,      0.f,      -0.75f,   0.f};
  std::vector<uint8_t> p(ops::packed_bytes(WeightFormat::Int8, 3, K), 0xee);
  std::vector<float> s(3, -1.f);
  ops::quantize_rows(WeightFormat::Int8, w.data(), 3, K, p.data(), s.data());
  ASSERT_EQ(p.size(), 24u);
  EXPECT_EQ(s[0], u);
  const int8_t want0[] = {-127, 2, 4, -2, 0, 2, 0};
  for (int k = 0; k < K; ++k) EXPECT_EQ(static_cast<int8_t>(p[static_cast<size_t>(k)]), want0[k]) << k;
  EXPECT_EQ(p[7], 0);
  EXPECT_EQ(s[1], 0.f);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(p[8 + static_cast<size_t>(k)], 0) << k;
  EXPECT_EQ(s[2], 1.f / 127.f);
  const int8_t want2[] = {127, -127, 32, 64, 0, -95, 0};  // 0.25 * 127 = 31.75, 0.5 * 127 = 63.5 -> 64, 95.25
  for (int k = 0; k < K; ++k) EXPECT_EQ(static_cast<int8_t>(p[16 + static_cast<size_t>(k)]), want2[k]) << k;
  // Dequantized: q * scale, one rounding.
  std::vector<float> back(w.size());
  ops::dequantize_rows_host(WeightFormat::Int8, p.data(), s.data(), 3, K, back.data());
  for (int k = 0; k < K; ++k) EXPECT_EQ(back[static_cast<size_t>(k)], want0[k] * u) << k;
  for (int k = 0; k < K; ++k) EXPECT_EQ(back[7 + static_cast<size_t>(k)], 0.f) << k;
  for (int k = 0; k < K; ++k)
    EXPECT_EQ(back[14 + static_cast<size_t>(k)], static_cast<float>(want2[k]) * (1.f / 127.f));
}

TEST(WeightQuantize, Q4TakesTheFirstLargestMagnitudeAsMinusEightAndPacksNibblesLowFirst) {
  const int K = 70;  // three groups: 32, 32 and 6 (26 elements of padding, code 8)
  std::vector<float> w(static_cast<size_t>(2) * K, 0.f);
  // Row 0, group 0: the largest magnitude 4 first, then -4 (a tie: the first wins), so d = 4 / -8 = -0.5.
  const float g0[] = {4.f, -4.f, 0.25f, 0.75f, -0.75f, 1.25f, -3.5f, 0.f, 2.f};
  for (size_t j = 0; j < std::size(g0); ++j) w[j] = g0[j];
  // Group 1 all zero: d = 0, every code 8. Group 2: -4 first then 4, d = 0.5.
  const float g2[] = {-4.f, 4.f, 1.f, -0.25f, 3.75f, 0.f};
  for (size_t j = 0; j < std::size(g2); ++j) w[64 + j] = g2[j];
  // Row 1: K columns of a ramp.
  for (int k = 0; k < K; ++k) w[static_cast<size_t>(K + k)] = static_cast<float>(k - 35) / 7.f;
  std::vector<uint8_t> p(ops::packed_bytes(WeightFormat::Q4, 2, K), 0xee);
  // Scales: three halves a row in two 32-bit words, the fourth half padding (0).
  const int spr = ops::scales_per_row(WeightFormat::Q4, K);
  ASSERT_EQ(spr, 2);
  std::vector<float> s(static_cast<size_t>(2) * spr, -1.f);
  ops::quantize_rows(WeightFormat::Q4, w.data(), 2, K, p.data(), s.data());
  ASSERT_EQ(p.size(), 96u);
  EXPECT_EQ(ops::q4_scale_bits(s.data(), 0), 0xbf00u);  // -0.5 as bfloat16: the top half of 0xbf000000
  EXPECT_EQ(ops::q4_scale_bits(s.data(), 1), 0u);       // the all-zero group: +0
  EXPECT_EQ(ops::q4_scale_bits(s.data(), 2), 0x3f00u);  // 0.5
  EXPECT_EQ(ops::q4_scale_bits(s.data(), 3), 0u);       // padding
  EXPECT_EQ(ops::float_bits(s[0]), 0x0000bf00u);        // little-endian: group 0 in the low half of word 0
  EXPECT_EQ(ops::float_bits(s[1]), 0x00003f00u);
  // codes: round_to_nearest_even(w / d) + 8, clamped to [0, 15]:
  //   4 / -0.5 = -8 -> 0; -4 -> 8 + 8 = 16 -> 15; 0.25 -> -0.5 -> -0 -> 8; 0.75 -> -1.5 -> -2 -> 6;
  //   -0.75 -> 1.5 -> 2 -> 10; 1.25 -> -2.5 -> -2 -> 6; -3.5 -> 7 -> 15; 0 -> 8; 2 -> -4 -> 4.
  const int codes0[] = {0, 15, 8, 6, 10, 6, 15, 8, 4};
  const auto code = [&](int row, int k) {
    const uint8_t b = p[static_cast<size_t>(row) * 48 + static_cast<size_t>(k / 32) * 16 + (k % 32) / 2];
    return (k % 2) ? b >> 4 : b & 0xf;
  };
  for (int k = 0; k < 9; ++k) EXPECT_EQ(code(0, k), codes0[k]) << k;
  EXPECT_EQ(p[0], 0xf0);  // k = 0 in the low nibble, k = 1 in the high one
  EXPECT_EQ(p[1], 0x68);
  for (int k = 9; k < 32; ++k) EXPECT_EQ(code(0, k), 8) << k;
  for (int b = 16; b < 32; ++b) EXPECT_EQ(p[static_cast<size_t>(b)], 0x88) << b;  // the all-zero group
  // Group 2 with d = 0.5: -4 -> 0; 4 -> 16 -> 15; 1 -> 10; -0.25 -> -0.5 -> -0 -> 8; 3.75 -> 7.5 -> 8 -> 16 -> 15.
  const int codes2[] = {0, 15, 10, 8, 15, 8};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(code(0, 64 + j), codes2[j]) << j;
  for (int b = 35; b < 48; ++b) EXPECT_EQ(p[static_cast<size_t>(b)], 0x88) << b;  // padding past K: code 8
  // Dequantized: (q - 8) * d.
  std::vector<float> back(w.size());
  ops::dequantize_rows_host(WeightFormat::Q4, p.data(), s.data(), 2, K, back.data());
  for (int k = 0; k < 9; ++k) EXPECT_EQ(back[static_cast<size_t>(k)], static_cast<float>(codes0[k] - 8) * -0.5f) << k;
  for (int k = 32; k < 64; ++k) EXPECT_EQ(back[static_cast<size_t>(k)], 0.f) << k;
  // Row 1: every element within half a step of its group's d (none is clamped: in each group of the ramp the
  // values on the side opposite the largest magnitude stay within 7 steps).
  for (int k = 0; k < K; ++k) {
    const float d = ops::q4_scale(s.data() + spr, k / 32);
    EXPECT_LE(std::abs(back[static_cast<size_t>(K + k)] - w[static_cast<size_t>(K + k)]), std::abs(d) * 0.5f + 1e-7f)
        << k;
  }
}

TEST(WeightQuantize, RoundTripErrorsAreWithinHalfAStepOnRandomRows) {
  for (int K : {1, 31, 33, 100, 768}) {
    const int N = 5;
    const auto w = test::randn(static_cast<size_t>(N) * K, 40 + K);
    for (WeightFormat f : {WeightFormat::F16, WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Q4}) {
      std::vector<uint8_t> p(ops::packed_bytes(f, N, K));
      std::vector<float> s(static_cast<size_t>(N) * ops::scales_per_row(f, K));
      ops::quantize_rows(f, w.data(), N, K, p.data(), s.data());
      std::vector<float> back(w.size());
      ops::dequantize_rows_host(f, p.data(), s.data(), N, K, back.data());
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>(n) * K + k;
          const double err = std::abs(static_cast<double>(back[i]) - w[i]);
          double bound = 0;
          switch (f) {
            case WeightFormat::F16: bound = std::abs(w[i]) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25); break;
            case WeightFormat::BF16: bound = std::abs(w[i]) * std::ldexp(1.0, -8); break;
            case WeightFormat::Int8: bound = s[static_cast<size_t>(n)] * 0.5 * (1 + 1e-6); break;
            // Q4: half a step of the stored (bfloat16) scale d, or for the clamped code 15 (7 d where w / d was 7.5
            // to m / d, m / 8 rounded to d within 2^-9) a whole step and 8 of that rounding.
            default:
              bound = std::abs(ops::q4_scale(s.data() + static_cast<size_t>(n) * ops::scales_per_row(f, K), k / 32)) *
                      (1 + 8 * std::ldexp(1.0, -9));
              break;
          }
          ASSERT_LE(err, bound) << ops::format_name(f) << " K " << K << " [" << n << ", " << k << "]";
        }
    }
  }
}

// Q4's scales are bfloat16, with fp32's range: a group of the largest finite weights keeps a finite scale, its
// largest weight exactly -8 d, and a group of weights near fp32's smallest normal keeps a normal scale.
TEST(WeightQuantize, Q4ScalesKeepFp32sRange) {
  std::vector<float> w(64, 0.25f);
  w[40] = -3.0e38f;
  for (int k = 0; k < 32; ++k) w[static_cast<size_t>(k)] = -1.5e-37f;
  std::vector<uint8_t> p(ops::packed_bytes(WeightFormat::Q4, 1, 64));
  std::vector<float> s(ops::scales_per_row(WeightFormat::Q4, 64));
  ops::quantize_rows(WeightFormat::Q4, w.data(), 1, 64, p.data(), s.data());
  const float d1 = ops::q4_scale(s.data(), 1), d0 = ops::q4_scale(s.data(), 0);
  EXPECT_EQ(d1, ops::bf16_to_f32(ops::f32_to_bf16(3.0e38f / 8.f)));
  EXPECT_TRUE(std::isnormal(d0)) << d0;
  std::vector<float> back(64);
  ops::dequantize_rows_host(WeightFormat::Q4, p.data(), s.data(), 1, 64, back.data());
  EXPECT_EQ(back[40], -8.f * d1);
  EXPECT_NEAR(back[40], -3.0e38f, 3.0e38f * std::ldexp(1.0, -9));
  for (int k = 0; k < 32; ++k)  // code 0 each: -8 d, d within 2^-9 of 1.5e-37 / 8
    EXPECT_NEAR(back[static_cast<size_t>(k)], -1.5e-37f, 1.5e-37 * std::ldexp(1.0, -9)) << k;
}

TEST(WeightQuantize, RefusesNonFiniteWeightsF32AndBadSizes) {
  std::vector<float> w = {1.f, 2.f, std::numeric_limits<float>::quiet_NaN(), 4.f};
  std::vector<uint8_t> p(64);
  std::vector<float> s(4);
  EXPECT_NE(test::message_of([&] {
              ops::quantize_rows(WeightFormat::Int8, w.data(), 2, 2, p.data(), s.data());
            }).find("w[1, 0] = nan is not finite"),
            std::string::npos);
  w[2] = std::numeric_limits<float>::infinity();
  EXPECT_NE(test::message_of([&] {
              ops::quantize_rows(WeightFormat::Q4, w.data(), 1, 4, p.data(), s.data());
            }).find("is not finite"),
            std::string::npos);
  w[2] = 3.f;
  EXPECT_NE(test::message_of([&] {
              ops::quantize_rows(WeightFormat::F32, w.data(), 1, 4, p.data(), s.data());
            }).find("format = 0"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] {
              ops::quantize_rows(WeightFormat::Int8, w.data(), 1, 4, p.data(), nullptr);
            }).find("scales must not be null"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] {
              ops::quantize_rows(WeightFormat::Int8, w.data(), -1, 4, p.data(), s.data());
            }).find("N = -1"),
            std::string::npos);
}

// Every executor refuses a bad format, sizes and missing scales with the same message, before any work.
TEST(WeightQuantize, TheQuantizedOpsRefuseBadArgumentsOnEveryExecutor) {
  test::webgpu_loopback();
  std::vector<ops::Backend*> executors{&ops::reference_backend(), &ops::backend(Device::CPU),
                                       &ops::backend(Device::WebGPU)};
  if (cuda_device_count() > 0) executors.push_back(&ops::backend(Device::CUDA));
  for (ops::Backend* be : executors) {
    float* A = static_cast<float*>(be->allocate(1024));
    float* C = static_cast<float*>(be->allocate(1024));
    auto* W = static_cast<uint8_t*>(be->allocate(1024));
    const std::string who = be->name();
    EXPECT_NE(test::message_of([&] { be->gemm_quant(2, 3, 4, A, 4, 0, W, A, C, 3, false); }).find("gemm_quant ("),
              std::string::npos)
        << who;
    EXPECT_NE(
        test::message_of([&] { be->gemm_quant(2, 3, 4, A, 4, 0, W, A, C, 3, true); }).find("format = 0: expected f16"),
        std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] { be->gemm_quant(2, 3, 4, A, 4, 9, W, A, C, 3, false); }).find("format = 9"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] { be->gemm_quant(2, 3, 4, A, 3, 3, W, A, C, 3, true); }).find("lda = 3"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] {
                be->gemm_quant(2, 3, 4, A, 4, 3, W, nullptr, C, 3, false);
              }).find("the scales of W are null: format int8 has 1 per row"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] { be->gemm_quant(-1, 3, 4, A, 4, 1, W, nullptr, C, 3, true); }).find("M = -1"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] { be->dequantize_rows(C, 3, 4, W, A, 2, 4); }).find("ld_out = 3 is below K = 4"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] { be->dequantize_rows(C, 4, 4, W, nullptr, 2, 4); }).find("format q4 has 1 per row"),
              std::string::npos)
        << who;
    const std::vector<int32_t> tok = {0, 1};
    const ops::Ids ids{tok, static_cast<const int32_t*>(static_cast<void*>(A))};
    EXPECT_NE(test::message_of([&] {
                be->embedding_forward_quant(Span(C, 4), ids, 1, W, nullptr, {}, 1.f, 1, 2, 4);
              }).find("x of 4 floats for B * T * C = 8"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] {
                be->embedding_forward_quant(Span(C, 8), ids, 2, W, nullptr, CSpan(A, 3), 1.f, 1, 2, 4);
              }).find("pos of 3 floats for T * C = 8"),
              std::string::npos)
        << who;
    EXPECT_NE(test::message_of([&] {
                be->embedding_forward_quant(Span(C, 8), ids, 0, W, nullptr, {}, 1.f, 1, 2, 4);
              }).find("format = 0"),
              std::string::npos)
        << who;
    be->free(A);
    be->free(C);
    be->free(W);
  }
}

}  // namespace
}  // namespace qkv::weight_quantize_test
