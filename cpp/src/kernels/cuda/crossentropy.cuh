// Softmax cross-entropy per row, with ignore_index and label smoothing as torch.nn.CrossEntropyLoss, and its
// gradient in the same kernel.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
//   lse = logsumexp(z);  -log p[c] = lse - z[c]   (no log(0), no overflow)
//   loss = (1-e) * (lse - z[target]) + e/V * sum_c (lse - z[c])
//   dlogits = scale * (p - (1-e) * onehot(target) - e/V),  0 on ignored rows
// Layout: logits, dlogits (rows, V); losses, targets (rows). Two kernels:
//   V <= kWarpMaxV (the char models' vocabularies): a warp per row, the row read once into registers
//     (ceil(V/32) values a lane), max, sum of exp and sum of z by shuffles, the gradient written from the
//     registers: one read and one write of the row, no barrier, 8 rows a block (a block per row left 3/4 of
//     its threads idle on V = 65 and spent its time in block-wide reductions).
//   larger V (the Seq2Seq's 10k-30k vocabularies): a block per row, float4 loads, max, sum of exp and sum of z
//     in ONE read of the row (the online softmax's combine), then the gradient pass: two reads of the row (the
//     second from L1/L2) and one write, where the old kernel read it 3-4 times (max, exp sum, smoothing, gradient).
// dlogits may alias logits: every thread has finished reading the row (a barrier, or the registers) before
// any writes, and then each thread writes only the elements it reads.
//
// This header holds the kernels (device code only), so that tests/cpp/emulation runs them on the CPU too;
// crossentropy.cu launches them.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace qkv::kernels::cuda {
namespace {

// ---- V > kWarpMaxV: a block per row, the statistics in one pass ----
// (m, s) = (max, sum of exp(z - m)) of a set of logits; two sets combine as
//   m = max(m1, m2),  s = s1 exp(m1 - m) + s2 exp(m2 - m)
// (the online softmax of Milakov & Gimelshein, 2018), so one read of the row gives lse = log(s) + m, and sz =
// sum(z) rides along for the smoothing term: loss = (1-e)(lse - z[t]) + e/V (V lse - sz).
struct Stats {
  float m, s, sz;
};
// A side with m = -inf (no logits yet, or only -inf ones) contributes nothing; both: s = 0, no inf - inf.
__device__ inline Stats combine(Stats a, Stats b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f, a.sz + b.sz};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m), a.sz + b.sz};
}
// Fold n values into st with a single rescale: exp(old m - new m) once per call, not once per value.
template <int N>
__device__ inline void fold(Stats& st, const float (&v)[N], int n) {
  float mc = st.m;
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (k < n) mc = fmaxf(mc, v[k]);
  if (mc == -INFINITY) return;  // nothing finite yet: keep (m, s) = (-inf, 0)
  float sum = st.s * expf(st.m - mc);
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (k < n) sum += expf(v[k] - mc), st.sz += v[k];
  st.m = mc, st.s = sum;
}

constexpr int kBlockThreads = 512;
constexpr int kUnroll = 4;  // float4's a thread loads before it folds them: 16 values, 17 exps, 4 loads in flight

// Block-wide combine (butterfly in each warp, then warp 0 over the warps' lane-0 results), returned to every
// thread from shared memory, so every thread gets the same bits. Every thread must call it (barriers), once per
// kernel (its shared result is not protected against a second call). A fixed tree: the same bits on every run.
__device__ Stats block_combine(Stats st) {
  __shared__ Stats part[kBlockThreads / kWarp];
  __shared__ Stats result;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int o = kWarp / 2; o > 0; o >>= 1)
    st = combine(st, {__shfl_xor_sync(kFullMask, st.m, o), __shfl_xor_sync(kFullMask, st.s, o),
                      __shfl_xor_sync(kFullMask, st.sz, o)});
  if (lane == 0) part[warp] = st;
  __syncthreads();
  if (warp == 0) {
    Stats t = lane < kBlockThreads / kWarp ? part[lane] : Stats{-INFINITY, 0.f, 0.f};
    for (int o = kWarp / 2; o > 0; o >>= 1)
      t = combine(t, {__shfl_xor_sync(kFullMask, t.m, o), __shfl_xor_sync(kFullMask, t.s, o),
                      __shfl_xor_sync(kFullMask, t.sz, o)});
    if (lane == 0) result = t;
  }
  __syncthreads();
  return result;
}

// One block per row. The row splits into a head of 0-3 logits up to the first 16-byte boundary, a body of nb
// float4's (vector loads whatever V and the row's alignment), and a tail of 0-3 logits.
//   pass 1: (m, s, sz) over the row, one read, then block_combine;
//   pass 2 (gradient): d = scale * (exp(z - m) / s - e/V) - [i == t] scale * (1-e), a second read and the write.
// Memory: the row is read twice and the gradient written once; the second read is of the row this block has just
// read (40 KiB at V = 10000, with 2 rows an SM in flight: L1/L2-resident), so from DRAM it is one read and one
// write, the floor for a loss with its gradient fused; pass 2 walks the row backwards, the most recently read part
// first, to keep it that way as far as the caches allow at larger V. vec_store: d's rows share z's alignment
// (always when d is z), so the body's stores are float4's too.
__global__ void __launch_bounds__(kBlockThreads)
    crossentropy_block_kernel(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale,
                              int V, int ignore_index, float smoothing, bool vec_store, const float* scale_dev) {
  scale = step_value(scale, scale_dev);
  const int row = blockIdx.x, tid = threadIdx.x;
  const float* z = logits + static_cast<size_t>(row) * V;
  float* d = dlogits ? dlogits + static_cast<size_t>(row) * V : nullptr;
  const int head = static_cast<int>((16 - reinterpret_cast<uintptr_t>(z) % 16) % 16 / sizeof(float));
  const int nb = (V - head) / 4, body_end = head + 4 * nb;  // tail: [body_end, V)
  const float4* z4 = reinterpret_cast<const float4*>(z + head);
  const int t = targets[row];
  if (t == ignore_index) {  // the whole block takes this branch: no barrier is skipped by part of it
    if (tid == 0) losses[row] = 0.f;
    if (!d) return;
    if (tid < head) d[tid] = 0.f;
    if (body_end + tid < V) d[body_end + tid] = 0.f;
    for (int q = tid; q < nb; q += kBlockThreads)
      if (vec_store)
        reinterpret_cast<float4*>(d + head)[q] = make_float4(0.f, 0.f, 0.f, 0.f);
      else
        for (int k = 0; k < 4; ++k) d[head + 4 * q + k] = 0.f;
    return;
  }
  const float zt = tid == 0 ? z[t] : 0.f;  // read before block_combine's barriers, so before any write to d (= z?)
  Stats st{-INFINITY, 0.f, 0.f};
  {
    float v[1] = {0.f};  // the head and the tail: a logit each for threads 0-3 and 4-7
    int n = 0;
    if (tid < head) v[0] = z[tid], n = 1;
    if (tid >= 4 && tid < 8 && body_end + tid - 4 < V) v[0] = z[body_end + tid - 4], n = 1;
    fold(st, v, n);
  }
  for (int q0 = tid; q0 < nb; q0 += kUnroll * kBlockThreads) {
    float v[4 * kUnroll];
    int n = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = q0 + u * kBlockThreads;
      if (q < nb) {
        const float4 c = z4[q];
        v[4 * u] = c.x, v[4 * u + 1] = c.y, v[4 * u + 2] = c.z, v[4 * u + 3] = c.w, n = 4 * (u + 1);
      }
    }
    fold(st, v, n);  // the valid chunks are a prefix (q0 + u * threads grows with u)
  }
  st = block_combine(st);
  const float lse = logf(st.s) + st.m;
  const float uniform = smoothing / static_cast<float>(V);
  if (tid == 0) {
    float loss = (1.f - smoothing) * (lse - zt);
    if (smoothing > 0.f) loss += uniform * (static_cast<float>(V) * lse - st.sz);
    losses[row] = loss;
  }
  if (!d) return;
  const float inv = 1.f / st.s, hit = scale * (1.f - smoothing);
  const auto grad = [&](float zi, int i) {
    const float di = scale * (expf(zi - st.m) * inv - uniform);
    return i == t ? di - hit : di;
  };
  // Backwards (see above), kUnroll float4's a thread loaded before any is stored: d may alias z, so a store
  // between two loads would hold the second back until the first returned.
  for (int q0 = nb - 1 - tid; q0 >= 0; q0 -= kUnroll * kBlockThreads) {
    float4 c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (q0 - u * kBlockThreads >= 0) c[u] = z4[q0 - u * kBlockThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = q0 - u * kBlockThreads;
      if (q < 0) break;
      const int i = head + 4 * q;
      const float4 o = make_float4(grad(c[u].x, i), grad(c[u].y, i + 1), grad(c[u].z, i + 2), grad(c[u].w, i + 3));
      if (vec_store) {
        reinterpret_cast<float4*>(d + head)[q] = o;
      } else {
        d[i] = o.x, d[i + 1] = o.y, d[i + 2] = o.z, d[i + 3] = o.w;
      }
    }
  }
  if (tid < head) d[tid] = grad(z[tid], tid);
  if (body_end + tid < V) d[body_end + tid] = grad(z[body_end + tid], body_end + tid);
}

constexpr int kWarpMaxV = 1024;
constexpr int kRowsPerBlock = 8;

// A warp per row; K = ceil(V / 32) values per lane kept in registers (lane j holds z[j], z[j + 32], ...).
template <int K>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    crossentropy_warp_kernel(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale,
                             int rows, int V, int ignore_index, float smoothing, const float* scale_dev) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: no shuffle is left half-way
  scale = step_value(scale, scale_dev);
  const float* z = logits + static_cast<size_t>(row) * V;
  float* d = dlogits ? dlogits + static_cast<size_t>(row) * V : nullptr;
  const int t = targets[row];
  if (t == ignore_index) {
    if (lane == 0) losses[row] = 0.f;
    if (d)
      for (int i = lane; i < V; i += kWarp) d[i] = 0.f;
    return;
  }
  const float zt = z[t];  // read by every lane before any lane writes (d may be z)
  float x[K];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = lane + k * kWarp;
    x[k] = i < V ? z[i] : -INFINITY;
    mx = fmaxf(mx, x[k]);
  }
  mx = warp_max(mx);
  float sum = 0.f, sz = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + k * kWarp < V) {
      sum += expf(x[k] - mx);
      sz += x[k];
    }
  sum = warp_sum(sum);
  const float lse = logf(sum) + mx;
  const float uniform = smoothing / static_cast<float>(V);
  if (smoothing > 0.f) sz = warp_sum(sz);
  if (lane == 0) {
    float loss = (1.f - smoothing) * (lse - zt);
    if (smoothing > 0.f) loss += uniform * (static_cast<float>(V) * lse - sz);
    losses[row] = loss;
  }
  if (!d) return;
  __syncwarp();  // the whole row (and z[t]) is read before the first write
  const float inv = 1.f / sum;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = lane + k * kWarp;
    if (i >= V) break;
    float di = scale * (expf(x[k] - mx) * inv - uniform);
    if (i == t) di -= scale * (1.f - smoothing);
    d[i] = di;
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
