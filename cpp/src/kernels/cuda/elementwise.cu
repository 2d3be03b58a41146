// The host side of the small edge ops (elementwise.cuh has the kernels and their description): the launches and
// the checks (cuda_kernels.h: add, fill, argmax_rows, mean_pool_*).
#include "kernels/cuda/elementwise.cuh"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

void add(float* out, const float* a, const float* b, size_t n) {
  if (n == 0) return;
  check(out && a && b, "add (cuda): a null device pointer for ", n, " elements");
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(out, a, b, n);
  check_launch("add");
}

void fill(float* x, float value, size_t n) {
  if (n == 0) return;
  check(x != nullptr, "fill (cuda): a null device pointer for ", n, " elements");
  if (value == 0.f) {
    check_cuda(cudaMemsetAsync(x, 0, n * sizeof(float), stream()), "fill", "cudaMemsetAsync");
    return;
  }
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, value, n);
  check_launch("fill");
}

void argmax_rows(int32_t* best, const float* logits, int rows, int V) {
  check(rows >= 0 && V >= 1, "argmax_rows (cuda): rows = ", rows, ", V = ", V, ": expected rows >= 0, V >= 1");
  if (rows == 0) return;
  const int per_block = kThreads / kWarp;
  argmax_kernel<<<(rows + per_block - 1) / per_block, kThreads, 0, stream()>>>(best, logits, rows, V);
  check_launch("argmax_rows");
}

void mean_pool_forward(float* out, const float* x, const uint8_t* key_pad, int B, int T, int C) {
  check(B >= 1 && T >= 1 && C >= 1 && key_pad, "mean_pool_forward (cuda): B = ", B, ", T = ", T, ", C = ", C,
        " and a key_pad: expected sizes >= 1 and the padding flags");
  const size_t n = static_cast<size_t>(B) * C;
  mean_pool_forward_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(
      out, x, key_pad, B, T, C);
  check_launch("mean_pool_forward");
}

void mean_pool_backward(float* dx, const float* dout, const uint8_t* key_pad, int B, int T, int C) {
  check(B >= 1 && T >= 1 && C >= 1 && key_pad, "mean_pool_backward (cuda): B = ", B, ", T = ", T, ", C = ", C,
        " and a key_pad: expected sizes >= 1 and the padding flags");
  const size_t n = static_cast<size_t>(B) * T * C;
  mean_pool_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(dx, dout, key_pad, B, T, C);
  check_launch("mean_pool_backward");
}

}  // namespace qkv::kernels::cuda
