// Softmax cross-entropy per row. reference: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
//   probs = softmax(logits),  loss = -log(probs[target])  (computed as logsumexp - logit, no log(0))
//   dlogits = scale * (probs - onehot(target))
#include <cmath>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

void crossentropy_forward(Span losses, Span probs, CSpan logits, const int32_t* targets, int rows, int V) {
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
      losses[r] = std::log(sum) + mx - z[targets[r]];
    }
  });
}

void crossentropy_backward(Span dlogits, CSpan probs, const int32_t* targets, float scale, int rows, int V) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* p = probs.data() + r * V;
      float* d = dlogits.data() + r * V;
      for (int i = 0; i < V; ++i) d[i] = scale * p[i];
      d[targets[r]] -= scale;
    }
  });
}

}  // namespace qkv::kernels
