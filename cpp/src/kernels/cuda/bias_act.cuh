// The bias + activation kernels of bias_act.cu (device code only, so that tests/cpp/emulation runs them on the
// CPU too; bias_act.cu launches them and says what they compute).
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace qkv::kernels::cuda {
namespace {

// sigma(z) of GELU's tanh form from e = exp(-|z|), which cannot overflow (z infinite when h^3 overflows: e = 0);
// sigma (1 - sigma) = e r^2 for either sign of z.
__device__ inline float gelu_tanh_sigma(float h, float& e, float& r) {
  const float z = h * (1.5957691216057308f + 1.5957691216057308f * 0.044715f * h * h);  // 2 sqrt(2/pi) (h + k h^3)
  e = expf(-fabsf(z));
  r = 1.f / (1.f + e);
  return z < 0.f ? e * r : r;
}

__device__ inline float act_of(Act act, float h) {
  switch (act) {
    case Act::Identity: return h;
    case Act::ReLU: return fmaxf(h, 0.f);
    case Act::GELU: return 0.5f * h * (1.f + erff(h * 0.70710678118654752f));
    case Act::GELUTanh: {
      float e, r;
      return h * gelu_tanh_sigma(h, e, r);
    }
  }
  return h;
}

// da * act'(h).
__device__ inline float grad_of(Act act, float da, float h) {
  switch (act) {
    case Act::Identity: return da;
    case Act::ReLU: return h > 0.f ? da : 0.f;
    case Act::GELU: {
      const float cdf = 0.5f * (1.f + erff(h * 0.70710678118654752f));
      const float pdf = 0.3989422804014327f * expf(-0.5f * h * h);
      return da * (cdf + h * pdf);
    }
    case Act::GELUTanh: {
      float e, r;
      const float sigma = gelu_tanh_sigma(h, e, r), x = fminf(fmaxf(h, -10.f), 10.f);
      const float dz = 1.5957691216057308f * (1.f + 3.f * 0.044715f * x * x);
      return da * (sigma + x * dz * e * r * r);
    }
  }
  return da;
}

// W consecutive elements of p: one 16-byte access for W = 4 (p 16-byte aligned), else one float.
template <int W>
struct Lanes {
  float v[W];
};
template <int W>
__device__ inline Lanes<W> load_lanes(const float* p) {
  if constexpr (W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    return {{q.x, q.y, q.z, q.w}};
  } else {
    return {{*p}};
  }
}
template <int W>
__device__ inline void store_lanes(float* p, const Lanes<W>& x) {
  if constexpr (W == 4)
    *reinterpret_cast<float4*>(p) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
  else
    *p = x.v[0];
}

// W elements a thread: 4 (16-byte loads and stores: the launcher checks that n and N are multiples of 4 and every
// pointer 16-byte aligned; more bytes in flight a thread, where one float a thread left the H200's bandwidth half
// used) or 1. i, i + W: the element index each thread starts at and its stride over the grid.
template <int W>
__global__ void bias_act_forward_kernel(float* a, float* h, const float* b, Act act, size_t n, int N) {
  for (size_t i = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * W; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x * W) {
    Lanes<W> v = load_lanes<W>(h + i);
    if (b) {
      const Lanes<W> bias = load_lanes<W>(b + i % N);  // N % W == 0: the W elements share a row
#pragma unroll
      for (int k = 0; k < W; ++k) v.v[k] += bias.v[k];
      store_lanes<W>(h + i, v);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) v.v[k] = act_of(act, v.v[k]);
    store_lanes<W>(a + i, v);
  }
}

// dh only (no bias gradient wanted); W as above.
template <int W>
__global__ void bias_act_backward_kernel(float* dh, const float* da, const float* h, Act act, size_t n) {
  for (size_t i = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * W; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x * W) {
    Lanes<W> d = load_lanes<W>(da + i);
    const Lanes<W> x = h ? load_lanes<W>(h + i) : Lanes<W>{};
#pragma unroll
    for (int k = 0; k < W; ++k) d.v[k] = grad_of(act, d.v[k], x.v[k]);
    store_lanes<W>(dh + i, d);
  }
}

// partial (blocks, N): [k][c] = sum of dh over block k's rows, in row order; dh written on the way (dh null: not).
__global__ void bias_act_columns_kernel(float* partial, float* dh, const float* da, const float* h, Act act, int rows,
                                        int N) {
  const int k = blockIdx.x, c = blockIdx.y * kColumnThreads + threadIdx.x;
  if (c >= N) return;
  const int r1 = min(rows, (k + 1) * kColumnBlockRows);
  float sum = 0.f;
  for (int r = k * kColumnBlockRows; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * N + c;
    const float d = grad_of(act, da[i], h ? h[i] : 0.f);
    if (dh) dh[i] = d;
    sum += d;
  }
  partial[static_cast<size_t>(k) * N + c] = sum;
}

}  // namespace
}  // namespace qkv::kernels::cuda
