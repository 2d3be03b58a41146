// Adam and AdamW, as torch.optim does them, in one pass over a model's flat parameter buffers.
// reference: https://pytorch.org/docs/stable/generated/torch.optim.Adam.html
// reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
//   g' = grad_scale * g                     (clip_grad_norm_'s scaling, folded in: g itself is not written)
//   AdamW: p *= 1 - lr * wd (decoupled, before the update);  Adam: g' += wd * p (L2 in the gradient)
//   m = b1 m + (1-b1) g',  v = b2 v + (1-b2) g'^2
//   p -= lr / (1-b1^t) * (m / (sqrt(v) / sqrt(1-b2^t) + eps))
// Each element sees the operations in the order of torch's single-tensor Adam (mul then add per line,
// the scalars computed in double as Python does, then rounded to float).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/rowwise.h"

namespace qkv::kernels {

void adam_reference(float* p, float* m, float* v, const float* g, size_t n, const AdamArgs& a) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] * a.grad_scale + a.l2 * p[i];
    p[i] *= a.shrink;
    m[i] = a.beta1 * m[i] + (1.f - a.beta1) * gi;
    v[i] = a.beta2 * v[i] + (1.f - a.beta2) * gi * gi;
    p[i] -= a.step * (m[i] / (std::sqrt(v[i]) / a.sqrt_bc2 + a.eps));
  }
}

double sum_squares_reference(const float* x, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

// The flat buffers go to threads in chunks of kChunk floats; a range that spans chunks is cut at their edges.
constexpr size_t kChunk = 16 * 1024;

void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), h.t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), h.t);
  AdamArgs base{};
  base.grad_scale = h.grad_scale;
  base.beta1 = h.beta1;
  base.beta2 = h.beta2;
  base.step = static_cast<float>(h.lr / bc1);
  base.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  base.eps = h.eps;
  const auto args_of = [&](float wd) {
    AdamArgs a = base;
    a.l2 = h.decoupled ? 0.f : wd;
    a.shrink = static_cast<float>(1.0 - (h.decoupled ? static_cast<double>(h.lr) * wd : 0.0));
    return a;
  };
  if (ranges.empty()) return;
  const auto body = rowwise_kernels().adam;
  const size_t end = ranges.back().end;
  const int chunks = static_cast<int>((end + kChunk - 1) / kChunk);
  for_rows(chunks, kChunk, [&](int c0, int c1) {
    const size_t lo = static_cast<size_t>(c0) * kChunk, hi = std::min(end, static_cast<size_t>(c1) * kChunk);
    // The first range that ends after lo, then every range that starts before hi.
    auto r = std::upper_bound(ranges.begin(), ranges.end(), lo, [](size_t x, const AdamRange& q) { return x < q.end; });
    for (; r != ranges.end() && r->begin < hi; ++r) {
      const size_t b = std::max(lo, r->begin), e = std::min(hi, r->end);
      const AdamArgs a = args_of(r->weight_decay);
      body(p.data() + b, m.data() + b, v.data() + b, g.data() + b, e - b, a);
    }
  });
}

double sum_squares(CSpan x) {
  const auto body = rowwise_kernels().sum_squares;
  const int chunks = static_cast<int>((x.size() + kChunk - 1) / kChunk);
  if (chunks <= 1) return body(x.data(), x.size());
  thread_local std::vector<double> scratch;  // per chunk, added in chunk order: thread-count independent
  scratch.assign(static_cast<size_t>(chunks), 0.0);
  double* const partial = scratch.data();  // (a lambda would see each worker's own thread_local)
  for_rows(chunks, kChunk, [&](int c0, int c1) {
    for (int c = c0; c < c1; ++c) {
      const size_t b = static_cast<size_t>(c) * kChunk;
      partial[c] = body(x.data() + b, std::min(kChunk, x.size() - b));
    }
  });
  double sum = 0.0;
  for (int c = 0; c < chunks; ++c) sum += partial[c];
  return sum;
}

}  // namespace qkv::kernels
