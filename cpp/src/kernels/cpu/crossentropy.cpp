// Softmax cross-entropy per row, with ignore_index and label smoothing as torch.nn.CrossEntropyLoss, and its
// gradient in the same sweep.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
//   lse = logsumexp(z);  -log p[c] = lse - z[c]   (no log(0), no overflow)
//   loss = (1-e) * (lse - z[target]) + e/V * sum_c (lse - z[c])
//   dlogits = scale * (p - (1-e) * onehot(target) - e/V)
// Per row: one pass for the max, one for exp(z - max) and its sum (the exps go straight into dlogits), one
// to normalise them into the gradient; the row stays in L1 between them. No probabilities buffer.
#include <cmath>

#include "kernels/cpu/rowwise.h"

namespace qkv::kernels {

void crossentropy_rows_reference(const CrossEntropyArgs& a, int r0, int r1) {
  const int V = a.V;
  const float uniform = a.smoothing / static_cast<float>(V);
  for (int row = r0; row < r1; ++row) {
    const float* z = a.logits + static_cast<size_t>(row) * V;
    float* d = a.dlogits ? a.dlogits + static_cast<size_t>(row) * V : nullptr;
    const int t = a.targets[row];
    if (t == a.ignore_index) {
      a.losses[row] = 0.f;
      if (d)
        for (int i = 0; i < V; ++i) d[i] = 0.f;
      continue;
    }
    float mx = z[0];
    for (int i = 1; i < V; ++i) mx = std::max(mx, z[i]);
    float sum = 0.f;
    for (int i = 0; i < V; ++i) sum += std::exp(z[i] - mx);
    const float lse = std::log(sum) + mx;
    float loss = (1.f - a.smoothing) * (lse - z[t]);
    if (a.smoothing > 0.f) {
      float all = 0.f;
      for (int i = 0; i < V; ++i) all += lse - z[i];
      loss += uniform * all;
    }
    a.losses[row] = loss;
    if (d) {
      // Written after every read of z's row: d may alias z.
      const float inv = 1.f / sum;
      for (int i = 0; i < V; ++i) d[i] = a.scale * (std::exp(z[i] - mx) * inv - uniform);
      d[t] -= a.scale * (1.f - a.smoothing);
    }
  }
}

namespace {

void run(const CrossEntropyArgs& a, int rows) {
  const auto body = rowwise_kernels().crossentropy;
  for_rows(rows, a.V, [&](int r0, int r1) { body(a, r0, r1); });
}

}  // namespace

void crossentropy_forward(Span losses, CSpan logits, const int32_t* targets, int rows, int V, int ignore_index,
                          float smoothing) {
  run({losses.data(), nullptr, logits.data(), targets, 0.f, V, ignore_index, smoothing}, rows);
}

void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const int32_t* targets, float scale,
                                   int rows, int V, int ignore_index, float smoothing) {
  run({losses.data(), dlogits.data(), logits.data(), targets, scale, V, ignore_index, smoothing}, rows);
}

}  // namespace qkv::kernels
