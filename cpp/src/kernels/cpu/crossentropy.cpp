// Softmax cross-entropy per row, with ignore_index and label smoothing as torch.nn.CrossEntropyLoss.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
//   lse = logsumexp(z);  -log p[c] = lse - z[c]   (no log(0), no overflow)
//   loss = (1-e) * (lse - z[target]) + e/V * sum_c (lse - z[c])
//   dlogits = scale * (p - (1-e) * onehot(target) - e/V)
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void crossentropy_forward(Span losses, Span probs, CSpan logits, const int32_t* targets, int rows, int V,
                          int ignore_index, float smoothing) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* z = logits.data() + r * V;
      float* p = probs.data() + r * V;
      float mx = z[0];
      for (int i = 1; i < V; ++i) mx = std::max(mx, z[i]);
      float sum = 0.f;
      for (int i = 0; i < V; ++i) {
        p[i] = std::exp(z[i] - mx);
        sum += p[i];
      }
      const float inv = 1.f / sum;
      for (int i = 0; i < V; ++i) p[i] *= inv;
      if (targets[r] == ignore_index) {
        losses[r] = 0.f;
        continue;
      }
      const float lse = std::log(sum) + mx;
      float loss = (1.f - smoothing) * (lse - z[targets[r]]);
      if (smoothing > 0.f) {
        float all = 0.f;
        for (int i = 0; i < V; ++i) all += lse - z[i];
        loss += smoothing / static_cast<float>(V) * all;
      }
      losses[r] = loss;
    }
  });
}

void crossentropy_backward(Span dlogits, CSpan probs, const int32_t* targets, float scale, int rows, int V,
                           int ignore_index, float smoothing) {
  const float uniform = smoothing / static_cast<float>(V);
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* p = probs.data() + r * V;
      float* d = dlogits.data() + r * V;
      if (targets[r] == ignore_index) {
        for (int i = 0; i < V; ++i) d[i] = 0.f;
        continue;
      }
      for (int i = 0; i < V; ++i) d[i] = scale * (p[i] - uniform);
      d[targets[r]] -= scale * (1.f - smoothing);
    }
  });
}

}  // namespace qkv::kernels
