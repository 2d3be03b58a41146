// The small ops of a model's edges (cuda_kernels.h): elementwise add and fill, the argmax of rows, and mean
// pooling over the non-padding positions. Each is one pass; none needs scratch.
//   add:       out[i] = a[i] + b[i]                     (out may alias a or b: one thread per element)
//   fill:      x[i] = value
//   argmax:    best[r] = the first index of the largest of row r (a warp per row, ties to the lower index)
//   mean pool: out[b, c] = sum_{t: key_pad[b,t] == 0} x[b, t, c] / count_b, in t order (the CPU's order);
//              backward dx[b, t, c] = dout[b, c] / count_b at those t, 0 elsewhere; count_b = 0 gives 0.
//
// This header holds the kernels (device code only), so that tests/cpp/emulation runs them on the CPU too;
// elementwise.cu launches them.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void fill_kernel(float* x, float value, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = value;
}

// One warp per row: each lane keeps its best (value, index) over a strided sweep, then the warp reduces,
// preferring the lower index on equal values, so the first maximum wins as on the CPU.
__global__ void argmax_kernel(int32_t* best, const float* logits, int rows, int V) {
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* z = logits + static_cast<size_t>(r) * V;
  float bv = -INFINITY;
  int bi = V;  // V: this lane has seen no element yet
  for (int v = lane; v < V; v += kWarp) {
    const float zv = z[v];
    if (bi == V || zv > bv) bv = zv, bi = v;  // strict: a lane's sweep goes up, so it keeps its first maximum
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, bv, o);
    const int oi = __shfl_xor_sync(kFullMask, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
  }
  if (lane == 0) best[r] = bi;
}

__device__ inline int count_tokens(const uint8_t* key_pad, int b, int T) {
  int n = 0;
  for (int t = 0; t < T; ++t) n += key_pad[static_cast<size_t>(b) * T + t] == 0;
  return n;
}

// One thread per (b, c): the sum over t in order, then one multiply by 1/count (the CPU's arithmetic).
__global__ void mean_pool_forward_kernel(float* out, const float* x, const uint8_t* key_pad, int B, int T, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(B) * C) return;
  const int b = static_cast<int>(i / C), c = static_cast<int>(i % C);
  const int n = count_tokens(key_pad, b, T);
  float s = 0.f;
  for (int t = 0; t < T; ++t)
    if (!key_pad[static_cast<size_t>(b) * T + t]) s += x[(static_cast<size_t>(b) * T + t) * C + c];
  out[i] = s * (n ? 1.f / static_cast<float>(n) : 0.f);
}

__global__ void mean_pool_backward_kernel(float* dx, const float* dout, const uint8_t* key_pad, int B, int T, int C) {
  const size_t n_all = static_cast<size_t>(B) * T * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n_all;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % C);
    const size_t bt = i / C;
    const int b = static_cast<int>(bt / T);
    if (key_pad[bt]) {
      dx[i] = 0.f;
      continue;
    }
    const int n = count_tokens(key_pad, b, T);
    dx[i] = dout[static_cast<size_t>(b) * C + c] * (n ? 1.f / static_cast<float>(n) : 0.f);
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
