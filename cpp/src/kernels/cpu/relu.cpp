// ReLU: y = max(x, 0); dy/dx = 1 for x > 0, else 0 (PyTorch's choice at 0).
#include <algorithm>

#include "kernels/kernels.h"

namespace qkv::kernels {

void relu_forward(Span y, CSpan x) {
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::max(x[i], 0.f);
}

void relu_backward(Span dx, CSpan dy, CSpan x) {
  for (size_t i = 0; i < x.size(); ++i) dx[i] = x[i] > 0.f ? dy[i] : 0.f;
}

}  // namespace qkv::kernels
