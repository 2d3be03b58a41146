#pragma once
// What the CUDA kernels share: warp and block reductions, grid sizing, and the deterministic column sums of
// the parameter gradients (LayerNorm's dw, db and a bias's db).
#include <cstddef>
#include <cstdint>

#if defined(QKV_WARP_EMULATION)
// tests/cpp/emulation runs kernels on the CPU: the CUDA built-ins (threadIdx, __syncthreads, __shfl_xor_sync,
// dynamic_shared, ...) are then its own, and the host-side error layer is not needed.
#include "emulation/warp_emulation.h"
#else
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#endif

namespace qkv::kernels::cuda {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

#if !defined(QKV_WARP_EMULATION)
// The block's dynamic shared memory (the launch's third argument) as T: 16-byte aligned.
template <class T>
__device__ inline T* dynamic_shared() {
  extern __shared__ float4 qkv_dynamic_shared[];
  return reinterpret_cast<T*>(qkv_dynamic_shared);
}
#endif

// The sum / max of v over the 32 lanes, returned to every lane (butterfly order: the same on every lane).
__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// The sum / max of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// Every thread of the block must call it (it holds barriers); it may be called again right away.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T part[kWarp];
  __shared__ T result;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (int o = kWarp / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T t = lane < warps ? part[lane] : identity;
    for (int o = kWarp / 2; o > 0; o >>= 1) t = op(t, __shfl_xor_sync(kFullMask, t, o));
    if (lane == 0) result = t;
  }
  __syncthreads();
  const T r = result;
  __syncthreads();  // part and result are reused by the next call
  return r;
}
// A launch argument a captured training step refreshes between replays (exec/cuda/step_graph.h): read from device
// memory when dev is set, else the value the launch carries.
template <class T>
__device__ inline T step_value(T value, const T* dev) {
  return dev ? *dev : value;
}

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Blocks of `threads` covering n items, for a grid-stride loop; capped, the loop covers the rest.
inline unsigned grid_for(size_t n, int threads) {
  const size_t blocks = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  return static_cast<unsigned>(blocks < 65536 * 8 ? (blocks > 0 ? blocks : 1) : 65536 * 8);
}

// ---- Column sums over rows in fixed blocks (the parameter gradients) ----
// Rows go in blocks of kColumnBlockRows, the CPU's kRowBlock (kernels/cpu/rowwise.h). Thread (block k,
// column c) adds its block's terms in row order into partial[k][c], starting from 0; then
// finish_column_sums adds the blocks in order into out[c] (out accumulates). That is the CPU scalar
// reference's order exactly, so the sums are deterministic and agree with the CPU to rounding of the terms.
constexpr int kColumnBlockRows = 32;
constexpr int kColumnThreads = 128;

inline int column_blocks(int rows) { return (rows + kColumnBlockRows - 1) / kColumnBlockRows; }

// out[c] += sum over blocks k of partial[k * stride + c], for c < N, k < blocks, in k order (out null: nothing).
// Host launcher; defined in layernorm.cu.
void add_column_sums(float* out, const float* partial, int blocks, int N, int stride, const char* op);

}  // namespace qkv::kernels::cuda
