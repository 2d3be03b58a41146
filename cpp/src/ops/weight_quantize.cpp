// The quantizer, its inverse and the quantized ops' argument checks (ops/weight_quantize.h has the rules).
#include "ops/weight_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qkv/error.h"

namespace qkv::ops {
namespace {

// Round to nearest, ties to even (the default rounding mode; std::nearbyint honours it, std::round does not).
float rne(float x) { return std::nearbyint(x); }

void quantize_int8_row(const float* w, int K, uint8_t* out, float* scale) {
  float amax = 0.f;
  for (int k = 0; k < K; ++k) amax = std::max(amax, std::abs(w[k]));
  const float s = amax / 127.f;
  *scale = s;
  for (int k = 0; k < K; ++k) {
    const float q = s == 0.f ? 0.f : std::clamp(rne(w[k] / s), -127.f, 127.f);
    out[k] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

// The codes in out, the G bfloat16 scales (and a padding half 0) in the row's scale words.
void quantize_q4_row(const float* w, int K, uint8_t* out, float* scale_words) {
  const int G = q4_groups(K);
  std::memset(scale_words, 0, sizeof(float) * static_cast<size_t>(scales_per_row(WeightFormat::Q4, K)));
  for (int g = 0; g < G; ++g) {
    const int k0 = g * group_size, k1 = std::min(K, k0 + group_size);
    float m = 0.f;  // the first element of largest magnitude, with its sign
    for (int k = k0; k < k1; ++k)
      if (std::abs(w[k]) > std::abs(m)) m = w[k];
    // Finite (m / 8 of a finite m rounds to a finite bfloat16). + 0 makes an all-zero group's scale +0 (its elements
    // +0, not -0).
    const uint16_t half = f32_to_bf16(m / -8.f + 0.f);
    std::memcpy(reinterpret_cast<unsigned char*>(scale_words) + 2 * static_cast<size_t>(g), &half, sizeof half);
    const float d = bf16_to_f32(half);  // the codes are of the scale stored, so w ~ (q - 8) d as dequantized
    for (int j = 0; j < group_size; ++j) {
      const int k = k0 + j;
      const int q = k >= K || d == 0.f ? 8 : static_cast<int>(std::clamp(rne(w[k] / d) + 8.f, 0.f, 15.f));
      uint8_t& b = out[g * 16 + j / 2];
      b = static_cast<uint8_t>((j & 1) ? (b & 0x0f) | q << 4 : (b & 0xf0) | q);
    }
  }
}

}  // namespace

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Int8: return "int8";
    case WeightFormat::Q4: return "q4";
  }
  return "unknown";
}

void quantize_rows(WeightFormat f, const float* w, int N, int K, uint8_t* packed, float* scales) {
  check(is_packed_format(static_cast<int>(f)), "quantize_rows: format = ", static_cast<int>(f),
        ": expected f16 (1), bf16 (2), int8 (3) or q4 (4)");
  check(N >= 0 && K >= 0, "quantize_rows: N = ", N, ", K = ", K, ": expected sizes >= 0");
  const int spr = scales_per_row(f, K);
  if (N == 0 || K == 0) {  // no bytes; an Int8 row of nothing has scale 0, as an all-zero row does
    if (scales) std::fill(scales, scales + static_cast<size_t>(N) * spr, 0.f);
    return;
  }
  check(w != nullptr && packed != nullptr, "quantize_rows: w and packed must not be null for ", N, " x ", K);
  check(spr == 0 || scales != nullptr, "quantize_rows: scales must not be null for format ", format_name(f));
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      check(std::isfinite(w[static_cast<size_t>(n) * K + k]), "quantize_rows: w[", n, ", ", k,
            "] = ", w[static_cast<size_t>(n) * K + k], " is not finite: only finite weights can be quantized");
  const size_t stride = row_stride(f, K);
  std::memset(packed, 0, static_cast<size_t>(N) * stride);
  for (int n = 0; n < N; ++n) {
    const float* wr = w + static_cast<size_t>(n) * K;
    uint8_t* row = packed + static_cast<size_t>(n) * stride;
    float* s = scales ? scales + static_cast<size_t>(n) * spr : nullptr;
    switch (f) {
      case WeightFormat::F16:
      case WeightFormat::BF16:
        for (int k = 0; k < K; ++k) {
          const uint16_t h = f == WeightFormat::F16 ? f32_to_f16(wr[k]) : f32_to_bf16(wr[k]);
          row[2 * k] = static_cast<uint8_t>(h), row[2 * k + 1] = static_cast<uint8_t>(h >> 8);
        }
        break;
      case WeightFormat::Int8: quantize_int8_row(wr, K, row, s); break;
      case WeightFormat::Q4: quantize_q4_row(wr, K, row, s); break;
      case WeightFormat::F32: break;
    }
  }
}

void dequantize_rows_host(WeightFormat f, const uint8_t* packed, const float* scales, int N, int K, float* out) {
  check(N >= 0 && K >= 0, "dequantize_rows_host: N = ", N, ", K = ", K, ": expected sizes >= 0");
  const size_t stride = row_stride(f, K);
  const int spr = scales_per_row(f, K);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      out[static_cast<size_t>(n) * K + k] = dequantize_element(
          f, packed + static_cast<size_t>(n) * stride, spr ? scales + static_cast<size_t>(n) * spr : nullptr, k);
}

WeightFormat check_quant_format(const char* who, int format) {
  check(is_packed_format(format), who, ": format = ", format,
        ": expected f16 (1), bf16 (2), int8 (3) or q4 (4) (fp32 weights go through gemm / embedding_forward)");
  return static_cast<WeightFormat>(format);
}

namespace {
void check_weights(const char* who, const char* name, WeightFormat f, const uint8_t* W, const float* scales, int rows,
                   int K) {
  if (rows == 0 || K == 0) return;
  check(W != nullptr, who, ": ", name, " is null for ", rows, " rows of K = ", K);
  check(scales_per_row(f, K) == 0 || scales != nullptr, who, ": the scales of ", name, " are null: format ",
        format_name(f), " has ", scales_per_row(f, K), " per row");
}
}  // namespace

void check_gemm_quant(const char* who, int M, int N, int K, const float* A, int lda, int format, const uint8_t* W,
                      const float* scales, const float* C, int ldc) {
  const WeightFormat f = check_quant_format(who, format);
  check(M >= 0 && N >= 0 && K >= 0, who, ": M = ", M, ", N = ", N, ", K = ", K, ": expected sizes >= 0");
  check(lda >= std::max(1, K) && ldc >= std::max(1, N), who, ": lda = ", lda, ", ldc = ", ldc,
        " are too small for K = ", K, ", N = ", N);
  if (M == 0 || N == 0) return;
  check(C != nullptr && (K == 0 || A != nullptr), who, ": A or C is null for M = ", M, ", N = ", N, ", K = ", K);
  check_weights(who, "W", f, W, scales, N, K);
}

void check_dequantize_rows(const char* who, const float* out, int ld_out, int format, const uint8_t* W,
                           const float* scales, int rows, int K) {
  const WeightFormat f = check_quant_format(who, format);
  check(rows >= 0 && K >= 0, who, ": rows = ", rows, ", K = ", K, ": expected sizes >= 0");
  check(ld_out >= std::max(1, K), who, ": ld_out = ", ld_out, " is below K = ", K);
  if (rows == 0 || K == 0) return;
  check(out != nullptr, who, ": out is null for ", rows, " rows");
  check_weights(who, "W", f, W, scales, rows, K);
}

void check_embedding_forward_quant(const char* who, size_t x_size, const int32_t* tokens, int format,
                                   const uint8_t* wte, const float* wte_scales, size_t pos_size, int B, int T, int C) {
  const WeightFormat f = check_quant_format(who, format);
  check(B >= 0 && T >= 0 && C >= 1, who, ": B = ", B, ", T = ", T, ", C = ", C, ": expected B, T >= 0 and C >= 1");
  const size_t n = static_cast<size_t>(B) * T * C;
  check(x_size >= n, who, ": x of ", x_size, " floats for B * T * C = ", n);
  check(pos_size == 0 || pos_size >= static_cast<size_t>(T) * C, who, ": pos of ", pos_size,
        " floats for T * C = ", static_cast<size_t>(T) * C, " (or empty: no positions)");
  if (n == 0) return;
  check(tokens != nullptr, who, ": tokens are null for B * T = ", static_cast<size_t>(B) * T);
  check_weights(who, "wte", f, wte, wte_scales, 1, C);
}

}  // namespace qkv::ops
