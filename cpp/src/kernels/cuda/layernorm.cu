// LayerNorm over the last dimension, optionally fused with the residual add that produces its input.
// reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html
//   [r = x + f]  mean = sum(r)/C, var = sum((r-mean)^2)/C (biased; two passes, as the CPU), rstd = 1/sqrt(var + 1e-5)
//   y = (r - mean) * rstd * w + b
// Backward with xhat = (x-mean)*rstd and g = dy*w:
//   dx = dr + rstd * (g - mean(g) - xhat * mean(g*xhat)),  dw += sum_rows dy*xhat,  db += sum_rows dy
// Layout: x, f, r, y, dx, dy, dr (rows, C); w, b, dw, db (C); mean, rstd (rows).
// One warp per row (llm.c's layernorm kernels): lane i takes columns i, i+32, ...; the row's later passes
// hit L1. A lane reads and writes only its own columns, so r may alias x or f, and dx may alias dr.
// dw and db: common.cuh's column sums, in the CPU's block order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

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

// dx only (the row reductions); dw and db come from layernorm_columns_kernel.
__global__ void layernorm_backward_kernel(float* dx, const float* dr, const float* dy, const float* x, const float* w,
                                          const float* mean, const float* rstd, int rows, int C) {
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
    pw += dy[i] * ((x[i] - mean[r]) * rstd[r]);
    pb += dy[i];
  }
  partial[static_cast<size_t>(k) * 2 * C + c] = pw;
  partial[static_cast<size_t>(k) * 2 * C + C + c] = pb;
}

__global__ void add_column_sums_kernel(float* out, const float* partial, int blocks, int N, int stride) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= N) return;
  float acc = out[c];
  for (int k = 0; k < blocks; ++k) acc += partial[static_cast<size_t>(k) * stride + c];
  out[c] = acc;
}

void check_sizes(const char* op, int rows, int C) {
  check(rows >= 0, op, " (cuda): rows = ", rows, ": expected >= 0");
  check(C > 0, op, " (cuda): C = ", C, ": expected > 0");
}

void forward(const char* op, float* y, float* mean, float* rstd, float* r, const float* x, const float* f,
             const float* w, const float* b, int rows, int C) {
  check_sizes(op, rows, C);
  if (rows == 0) return;
  check(y && mean && rstd && x && w && b && (!f || r), op, " (cuda): null device pointer");
  layernorm_forward_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads>>>(y, mean, rstd, r, x, f, w, b, rows,
                                                                                     C);
  check_launch(op);
}

}  // namespace

void add_column_sums(float* out, const float* partial, int blocks, int N, int stride, const char* op) {
  if (!out || N == 0 || blocks == 0) return;
  add_column_sums_kernel<<<(N + kColumnThreads - 1) / kColumnThreads, kColumnThreads>>>(out, partial, blocks, N,
                                                                                        stride);
  check_launch(op);
}

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int rows,
                       int C) {
  forward("layernorm_forward", y, mean, rstd, nullptr, x, nullptr, w, b, rows, C);
}

void residual_layernorm_forward(float* r, float* y, float* mean, float* rstd, const float* x, const float* f,
                                const float* w, const float* b, int rows, int C) {
  check(f != nullptr, "residual_layernorm_forward (cuda): f is null");
  forward("residual_layernorm_forward", y, mean, rstd, r, x, f, w, b, rows, C);
}

size_t layernorm_backward_scratch_size(int rows, int C) {
  return static_cast<size_t>(column_blocks(rows)) * 2 * static_cast<size_t>(C);
}

void layernorm_backward(float* dx, float* dw, float* db, float* scratch, const float* dr, const float* dy,
                        const float* x, const float* w, const float* mean, const float* rstd, int rows, int C) {
  const char* op = "layernorm_backward";
  check_sizes(op, rows, C);
  if (rows == 0) return;
  check(dx && dw && db && scratch && dy && x && w && mean && rstd, op, " (cuda): null device pointer");
  const int blocks = column_blocks(rows);
  // The column sums first: they read dy and x, which the contract lets no output alias, so order is free.
  layernorm_columns_kernel<<<dim3(blocks, (C + kColumnThreads - 1) / kColumnThreads), kColumnThreads>>>(
      scratch, dy, x, mean, rstd, rows, C);
  check_launch(op);
  add_column_sums(dw, scratch, blocks, C, 2 * C, op);
  add_column_sums(db, scratch + C, blocks, C, 2 * C, op);
  layernorm_backward_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads>>>(dx, dr, dy, x, w, mean, rstd,
                                                                                      rows, C);
  check_launch(op);
}

}  // namespace qkv::kernels::cuda
