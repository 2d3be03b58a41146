// Bias + activation, the epilogue of a Linear layer, in one pass over its output (kernels.h: Act).
//   Identity: h += b
//   ReLU: a = max(h, 0);  dh = h > 0 ? da : 0   (PyTorch's choice at 0)
//     reference: https://pytorch.org/docs/stable/generated/torch.nn.ReLU.html
//   GELU, exact: a = h * Phi(h), Phi(h) = (1 + erf(h / sqrt(2))) / 2;  dh = da * (Phi(h) + h * phi(h)),
//     phi(h) = exp(-h^2/2) / sqrt(2 pi).  reference: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html
//   GELUTanh (approximate='tanh', GPT-2's gelu_new): t = tanh(u), u = sqrt(2/pi) (h + 0.044715 h^3);
//     a = 0.5 h (1 + t);  dh = da * (0.5 (1 + t) + 0.5 h (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 h^2)),
//     PyTorch's formulas (aten's GeluKernel), here as the plain scalar kernel; the SIMD one (rowwise_simd.h) uses
//     h sigma(2u) instead. The derivative clamps h to [-10, 10], where t is +-1 exactly in float and the second
//     term 0, so that h^3 cannot overflow into inf * 0.
// The forward keeps h (bias added) as the backward's input; the backward writes dh and sums db in the same
// pass, db in fixed blocks of rows (sum_in_row_blocks), so its value does not depend on the thread count.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/rowwise.h"

namespace qkv::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f, kTanhGeluK = 0.044715f;

float act_of(Act act, float h) {
  switch (act) {
    case Act::Identity: return h;
    case Act::ReLU: return std::max(h, 0.f);
    case Act::GELU: return 0.5f * h * (1.f + std::erf(h * static_cast<float>(M_SQRT1_2)));
    case Act::GELUTanh: return 0.5f * h * (1.f + std::tanh(kSqrt2OverPi * (h + kTanhGeluK * h * h * h)));
  }
  return h;
}

float grad_of(Act act, float h) {
  switch (act) {
    case Act::Identity: return 1.f;
    case Act::ReLU: return h > 0.f ? 1.f : 0.f;
    case Act::GELU: {
      const float cdf = 0.5f * (1.f + std::erf(h * static_cast<float>(M_SQRT1_2)));
      const float pdf = 0.3989422804014327f * std::exp(-0.5f * h * h);
      return cdf + h * pdf;
    }
    case Act::GELUTanh: {
      const float x = std::clamp(h, -10.f, 10.f), x2 = x * x;
      const float t = std::tanh(kSqrt2OverPi * (x + kTanhGeluK * x2 * x));
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kTanhGeluK * x2);
    }
  }
  return 1.f;
}

}  // namespace

void bias_act_rows_reference(const BiasActArgs& a, int r0, int r1) {
  for (int row = r0; row < r1; ++row) {
    float *h = a.h + static_cast<size_t>(row) * a.N, *out = a.a + static_cast<size_t>(row) * a.N;
    for (int i = 0; i < a.N; ++i) {
      if (a.b) h[i] += a.b[i];
      out[i] = act_of(a.act, h[i]);
    }
  }
}

void bias_act_backward_rows_reference(const BiasActBackwardArgs& a, int r0, int r1, float* db) {
  for (int row = r0; row < r1; ++row) {
    const size_t o = static_cast<size_t>(row) * a.N;
    for (int i = 0; i < a.N; ++i) {
      // ReLU selects rather than multiplies, as PyTorch's threshold_backward does (0 * inf would be NaN).
      // Identity reads no h: a Linear's bias gradient passes none (h is null then).
      const float d = a.act == Act::Identity ? a.da[o + i]
                      : a.act == Act::ReLU   ? (a.h[o + i] > 0.f ? a.da[o + i] : 0.f)
                                             : a.da[o + i] * grad_of(a.act, a.h[o + i]);
      if (a.dh) a.dh[o + i] = d;
      if (db) db[i] += d;
    }
  }
}

void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N) {
  const BiasActArgs args{a.data(), h.data(), b.empty() ? nullptr : b.data(), act, N};
  const auto body = rowwise_kernels().bias_act;
  for_rows(rows, N, [&](int r0, int r1) { body(args, r0, r1); });
}

void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N) {
  const BiasActBackwardArgs args{dh.empty() ? nullptr : dh.data(), da.data(), h.empty() ? nullptr : h.data(), act, N};
  const auto body = rowwise_kernels().bias_act_backward;
  if (db.empty()) {
    if (args.dh) for_rows(rows, N, [&](int r0, int r1) { body(args, r0, r1, nullptr); });
    return;
  }
  sum_in_row_blocks(
      rows, N, static_cast<size_t>(N), [&](int r0, int r1, float* slot) { body(args, r0, r1, slot); },
      [&](const float* slot) {
        for (int i = 0; i < N; ++i) db[i] += slot[i];
      });
}

}  // namespace qkv::kernels
