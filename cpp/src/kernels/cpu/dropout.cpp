// Inverted dropout: y = x * keep / (1 - p), keep decided by dropout_hash(seed, i) (kernels/cpu/dropout.h).
// reference: https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html
#include "kernels/cpu/dropout.h"

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {
namespace {

void apply(Span out, CSpan in, float p, uint64_t seed) {
  const uint32_t threshold = dropout_threshold(p);
  const float scale = 1.f / (1.f - p);
  parallel_for(static_cast<int64_t>(in.size()) / 4096 + 1, [&](int64_t c0, int64_t c1) {
    const size_t end = std::min(in.size(), static_cast<size_t>(c1) * 4096);
    for (size_t i = static_cast<size_t>(c0) * 4096; i < end; ++i)
      out[i] = dropout_hash(seed, i) >= threshold ? in[i] * scale : 0.f;
  });
}

}  // namespace

void dropout_forward(Span y, CSpan x, float p, uint64_t seed) { apply(y, x, p, seed); }
void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed) { apply(dx, dy, p, seed); }

}  // namespace qkv::kernels
