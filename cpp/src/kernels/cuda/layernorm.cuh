// LayerNorm over the last dimension, optionally fused with the residual add that produces its input.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html
//   [r = x + f]  mean = sum(r)/C, var = sum((r-mean)^2)/C (biased; two passes, as the CPU), rstd = 1/sqrt(var + 1e-5)
//   y = (r - mean) * rstd * w + b
// Backward with xhat = (x-mean)*rstd and g = dy*w:
//   dx = dr + rstd * (g - mean(g) - xhat * mean(g*xhat)),  dw += sum_rows dy*xhat,  db += sum_rows dy
// Layout: x, f, r, y, dx, dy, dr (rows, C); w, b, dw, db (C); mean, rstd (rows).
// Forward: one warp per row (llm.c's layernorm kernels): lane i takes columns i, i+32, ...; the row's later
// passes hit L1. Backward (C <= 1024): one fused kernel, a block per 32-row group computing dx a warp per row
// from registers and the group's dw/db partial through shared memory (see "Backward" below), then one small
// kernel adding the partials in group order. A lane reads and writes only its own columns, so r may alias x
// or f, and dx may alias dr. dw and db are summed in the CPU's order (common.cuh): deterministic.
//
// This header holds the kernels (device code only), so that tests/cpp/emulation runs them on the CPU too;
// layernorm.cu launches them.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace qkv::kernels::cuda {
namespace {

constexpr float kEps = 1e-5f;     // kernels/cpu/rowwise.h: kLayerNormEps
constexpr int kRowsPerBlock = 8;  // warps per block of 256 threads
constexpr int kThreads = kRowsPerBlock * kWarp;

// f null: y = LN(x). Otherwise r = x + f first, y = LN(r).
__global__ void layernorm_forward_kernel(float* y, float* mean, float* rstd, float* r, const float* x, const float* f,
                                         const float* w, const float* b, int rows, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // whole warps leave together: no shuffles are left waiting
  const size_t o = static_cast<size_t>(row) * C;
  const float* xr = x + o;
  if (f) {
    for (int i = lane; i < C; i += kWarp) r[o + i] = x[o + i] + f[o + i];
    xr = r + o;  // this lane reads back only what it wrote
  }
  float s = 0.f;
  for (int i = lane; i < C; i += kWarp) s += xr[i];
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.f;
  for (int i = lane; i < C; i += kWarp) v += (xr[i] - m) * (xr[i] - m);
  const float rs = 1.f / sqrtf(warp_sum(v) / static_cast<float>(C) + kEps);  // not rsqrtf: the CPU's rounding
  for (int i = lane; i < C; i += kWarp) y[o + i] = (xr[i] - m) * rs * w[i] + b[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// ---- Backward ----
// The fused kernel (C <= kFusedMaxC): block k owns the 32-row group [32k, 32k + 32), the CPU's kRowBlock, so
// that its dw/db partial is the CPU's slot k term for term. Its 8 warps walk the group in 4 tiles of 8 rows,
// warp w taking row 8 * tile + w:
//   rows (a warp per row, the row in registers):  mean_g = sum(dy*w)/C, mean_gx = sum(dy*w*xhat)/C by shuffles,
//     then dx = dr + rstd * (dy*w - mean_g - xhat*mean_gx) straight from the registers. Lane j holds columns
//     4(j + 32i) .. +3 (float4 loads and stores, when C % 4 == 0 and every row pointer is 16-byte aligned) or
//     j + 32i (scalar), i < K: K = ceil(C / 128) float4's (4K floats) a lane, K a template argument so the row
//     lives in registers. w sits in registers for the whole group.
//   columns: the warps leave dy and xhat of their rows in shared memory (8 rows x C, twice); after a barrier,
//     thread t takes columns t, t + 256, ... and adds the tile's rows in row order:
//       pw[c] = fma(dy, xhat, pw[c]), pb[c] += dy   (the CPU's fma(dy, xhat, dw) and db + dy, rowwise_simd.h)
//     in registers across the 4 tiles, then writes partial[k] = [pw (C) | pb (C)].
// So each tile reads dy and x once from memory, and the column sums cost shared memory traffic only (the old
// scheme's layernorm_columns_kernel read dy and x a second time). Each warp loads its next row (dy, x, mean,
// rstd) into the registers it has just freed before the barriers and the column pass, so that load overlaps
// them. add_column_sums then adds the partials to dw, db in block order: the CPU's order exactly.
constexpr int kTileRows = kRowsPerBlock;  // a row per warp per tile
constexpr int kFusedMaxK = 8;             // float4's a lane: C <= 1024 fused
constexpr int kFusedMaxC = 4 * kWarp * kFusedMaxK;

template <int K, bool kVec>
struct RowRegs {
  float v[4 * K];
  // Column of element e of this lane (see the layout above).
  __device__ static int col(int lane, int e) { return kVec ? 4 * (lane + kWarp * (e / 4)) + e % 4 : lane + kWarp * e; }
  // v = p[0 .. C) at this lane's columns, 0 past C.
  __device__ void load(const float* p, int lane, int C) {
    if constexpr (kVec) {
#pragma unroll
      for (int i = 0; i < K; ++i) {
        const int c = 4 * (lane + kWarp * i);
        const float4 q = c < C ? *reinterpret_cast<const float4*>(p + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4 * K; ++e) v[e] = col(lane, e) < C ? p[col(lane, e)] : 0.f;
    }
  }
  __device__ void store(float* p, int lane, int C) const {
    if constexpr (kVec) {
#pragma unroll
      for (int i = 0; i < K; ++i) {
        const int c = 4 * (lane + kWarp * i);
        if (c < C) *reinterpret_cast<float4*>(p + c) = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4 * K; ++e)
        if (col(lane, e) < C) p[col(lane, e)] = v[e];
    }
  }
};

// partial (groups, 2C): [k][c] = sum over group k's rows of dy*xhat, [k][C + c] = sum of dy, in row order.
// Dynamic shared memory: 2 * kTileRows * C floats (dy, then xhat, of the tile's rows).
template <int K, bool kVec>
__global__ void __launch_bounds__(kThreads, K <= 3 ? (kVec ? 4 : 3) : (K <= 4 ? 2 : 1))
    layernorm_backward_kernel(float* partial, float* dx, const float* dr, const float* dy, const float* x,
                              const float* w, const float* mean, const float* rstd, int rows, int C) {
  float* s_dy = dynamic_shared<float>();  // 16-byte aligned: the vector stores need it
  float* s_xh = s_dy + kTileRows * C;
  constexpr int kCols = (4 * kWarp * K + kThreads - 1) / kThreads;  // columns a thread sums
  using Row = RowRegs<K, kVec>;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int r0 = blockIdx.x * kColumnBlockRows, r1 = min(rows, r0 + kColumnBlockRows);
  const float Cf = static_cast<float>(C);
  Row wv, g, h;  // w; dy then the gradient; x then xhat
  wv.load(w, lane, C);
  float pw[kCols], pb[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) pw[j] = pb[j] = 0.f;
  // This warp's first row, loaded ahead.
  int row = r0 + warp;
  float m = 0.f, s = 0.f;
  if (row < r1) {
    g.load(dy + static_cast<size_t>(row) * C, lane, C);
    h.load(x + static_cast<size_t>(row) * C, lane, C);
    m = mean[row], s = rstd[row];
  }
  for (int t0 = r0; t0 < r1; t0 += kTileRows) {  // the same trip count in every warp: the barriers match
    if (row < r1) {
      const size_t o = static_cast<size_t>(row) * C;
      float sg = 0.f, sgx = 0.f;
#pragma unroll
      for (int e = 0; e < 4 * K; ++e) {
        h.v[e] = (h.v[e] - m) * s;  // xhat (garbage past C, where dy = w = 0: it adds 0 and is never stored)
        const float ge = g.v[e] * wv.v[e];
        sg += ge;
        sgx = fmaf(ge, h.v[e], sgx);
      }
      const float mean_g = warp_sum(sg) / Cf, mean_gx = warp_sum(sgx) / Cf;
      const int slot = (row - t0) * C;
      g.store(s_dy + slot, lane, C);
      h.store(s_xh + slot, lane, C);
#pragma unroll
      for (int e = 0; e < 4 * K; ++e) g.v[e] = s * (g.v[e] * wv.v[e] - mean_g - h.v[e] * mean_gx);
      // dr may be dx: the whole row of dr is read (into h; xhat is done with) before dx is written, which also
      // lets the K loads go out together (a store between two loads through pointers that may alias would hold
      // each load back until the previous store).
      if (dr) {
        h.load(dr + o, lane, C);
#pragma unroll
        for (int e = 0; e < 4 * K; ++e) g.v[e] = h.v[e] + g.v[e];
      }
      g.store(dx + o, lane, C);
      // The next tile's row, into the registers just freed: in flight during the barriers and column sums.
      row += kTileRows;
      if (row < r1) {
        g.load(dy + static_cast<size_t>(row) * C, lane, C);
        h.load(x + static_cast<size_t>(row) * C, lane, C);
        m = mean[row], s = rstd[row];
      }
    }
    __syncthreads();  // the tile's dy and xhat are in shared memory
    const int n = min(kTileRows, r1 - t0);
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int c = static_cast<int>(threadIdx.x) + j * kThreads;
      if (c < C)
        for (int r = 0; r < n; ++r) {
          const float a = s_dy[r * C + c];
          pw[j] = fmaf(a, s_xh[r * C + c], pw[j]);
          pb[j] += a;
        }
    }
    __syncthreads();  // read before the next tile overwrites it
  }
  float* out = partial + static_cast<size_t>(blockIdx.x) * 2 * C;
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * kThreads;
    if (c < C) out[c] = pw[j], out[C + c] = pb[j];
  }
}

// C > kFusedMaxC (the row does not fit a lane's registers): a warp per row for dx, looping over the row (its
// later passes hit L1), and layernorm_columns_kernel for the partials, which reads dy and x once more.
__global__ void layernorm_backward_wide_kernel(float* dx, const float* dr, const float* dy, const float* x,
                                               const float* w, const float* mean, const float* rstd, int rows, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const size_t o = static_cast<size_t>(row) * C;
  const float m = mean[row], s = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int i = lane; i < C; i += kWarp) {
    const float g = dy[o + i] * w[i];
    sg += g;
    sgx += g * ((x[o + i] - m) * s);
  }
  const float mean_g = warp_sum(sg) / static_cast<float>(C);
  const float mean_gx = warp_sum(sgx) / static_cast<float>(C);
  for (int i = lane; i < C; i += kWarp) {
    const float xhat = (x[o + i] - m) * s;
    const float d = s * (dy[o + i] * w[i] - mean_g - xhat * mean_gx);
    dx[o + i] = (dr ? dr[o + i] : 0.f) + d;
  }
}

// partial (blocks, 2C): [k][c] = sum of dy*xhat over block k's rows, [k][C + c] = sum of dy, in row order.
__global__ void layernorm_columns_kernel(float* partial, const float* dy, const float* x, const float* mean,
                                         const float* rstd, int rows, int C) {
  const int k = blockIdx.x, c = blockIdx.y * kColumnThreads + threadIdx.x;
  if (c >= C) return;
  const int r1 = min(rows, (k + 1) * kColumnBlockRows);
  float pw = 0.f, pb = 0.f;
  for (int r = k * kColumnBlockRows; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * C + c;
    pw = fmaf(dy[i], (x[i] - mean[r]) * rstd[r], pw);  // the CPU's fma(dy, xhat, dw)
    pb += dy[i];
  }
  partial[static_cast<size_t>(k) * 2 * C + c] = pw;
  partial[static_cast<size_t>(k) * 2 * C + C + c] = pb;
}

// out0[j] += sum_k partial[k * stride + j] for j < N, and (out1 not null) out1[j - N] += the same for
// N <= j < 2N, k = 0, 1, ..., blocks - 1 in that order (one float accumulator, the CPU's order).
// The adds are serial per column (that order), so the time goes into getting the partials on chip: a block
// takes only kSumColumns = 8 columns (2C / 8 blocks: 96 at C = 384), its 256 threads stage kSumChunk = 512
// partial rows of them at once in shared memory (16 independent loads a thread, 32-byte row pieces: whole
// sectors), and lanes 0-7 of warp 0 then add them in row order. (A thread per column loading its own column,
// as before, kept 2C threads with a load or two each in flight: latency-bound, about as slow as the backward.)
constexpr int kSumColumns = 8;
constexpr int kSumChunk = 512;
constexpr int kSumLoads = kSumChunk * kSumColumns / kThreads;  // a thread's loads per chunk
__global__ void __launch_bounds__(kThreads)
    add_column_sums_kernel(float* out0, float* out1, const float* partial, int blocks, int N, int stride) {
  __shared__ float tile[kSumChunk][kSumColumns];  // 16 KiB; (row, column) = (i / 8, i % 8) of flat index i
  const int total = out1 ? 2 * N : N, j0 = blockIdx.x * kSumColumns;
  const int tid = threadIdx.x, j = j0 + tid;  // j: the column of adder lanes 0-7
  const bool adder = tid < kSumColumns && j < total;
  float acc = 0.f;
  if (adder) acc = j < N ? out0[j] : out1[j - N];
  for (int k0 = 0; k0 < blocks; k0 += kSumChunk) {
    const int n = min(kSumChunk, blocks - k0);
#pragma unroll
    for (int i = 0; i < kSumLoads; ++i) {
      const int flat = tid + i * kThreads, r = flat / kSumColumns, c = flat % kSumColumns;
      if (r < n && j0 + c < total) tile[r][c] = partial[static_cast<size_t>(k0 + r) * stride + j0 + c];
    }
    __syncthreads();
    if (adder)
      for (int r = 0; r < n; ++r) acc += tile[r][tid];
    __syncthreads();  // read before the next chunk overwrites it
  }
  if (adder) (j < N ? out0[j] : out1[j - N]) = acc;
}

}  // namespace
}  // namespace qkv::kernels::cuda
