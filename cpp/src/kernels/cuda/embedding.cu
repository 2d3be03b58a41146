// Token embedding (optionally scaled, as the paper's x * sqrt(d_model)) plus a position table:
//   x[b,t,:] = scale * wte[tokens[b,t],:] + pos[t,:]
// The backward scatters: dwte[token] += scale * dx, dpos[t] += dx (learned positions only). Tokens repeat, so
// the scatter is turned around into gathers with one writer per output element (no atomics, a fixed order):
//   dwte: one thread per (distinct token, column) walks that token's rows in increasing order
//         (bucket_tokens, embedding_buckets.cpp), adding scale * dx with unfused multiply and add
//         (__fmul_rn, __fadd_rn): the CPU's loop, operation for operation, so dwte matches it bit for bit;
//   dpos: one thread per (t, column) walks the batch in order, likewise.
// Layout: x, dx (B,T,C); wte, dwte (V,C); pos, dpos (T_max,C), of which rows [0, T) are used.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(float* x, const int32_t* tokens, const float* wte, const float* pos,
                                         float scale, int T, int C, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / C;
    const int c = static_cast<int>(i % C), t = static_cast<int>(r % T);
    x[i] =
        __fadd_rn(__fmul_rn(scale, wte[static_cast<size_t>(tokens[r]) * C + c]), pos[static_cast<size_t>(t) * C + c]);
  }
}

// Block (bucket k, column block): dwte[token[k]][c] += scale * dx[row][c] for each of the token's rows, in order.
__global__ void embedding_wte_kernel(float* dwte, const float* dx, const int32_t* token, const int32_t* start,
                                     const int32_t* row, float scale, int C) {
  const int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float* out = dwte + static_cast<size_t>(token[k]) * C + c;
  float acc = *out;
  for (int j = start[k]; j < start[k + 1]; ++j)
    acc = __fadd_rn(acc, __fmul_rn(scale, dx[static_cast<size_t>(row[j]) * C + c]));
  *out = acc;
}

// Thread (t, c): dpos[t][c] += dx[b][t][c] for b = 0, 1, ..., B-1.
__global__ void embedding_pos_kernel(float* dpos, const float* dx, int B, int T, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;  // t * C + c
  if (i >= static_cast<size_t>(T) * C) return;
  float acc = dpos[i];
  for (int b = 0; b < B; ++b) acc = __fadd_rn(acc, dx[static_cast<size_t>(b) * T * C + i]);
  dpos[i] = acc;
}

void check_sizes(const char* op, int B, int T, int C) {
  check(B >= 0 && T >= 0, op, " (cuda): B = ", B, ", T = ", T, ": expected >= 0");
  check(C > 0, op, " (cuda): C = ", C, ": expected > 0");
}

}  // namespace

void embedding_forward(float* x, const int32_t* tokens, const float* wte, const float* pos, float scale, int B, int T,
                       int C) {
  const char* op = "embedding_forward";
  check_sizes(op, B, T, C);
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  check(x && tokens && wte && pos, op, " (cuda): null device pointer");
  embedding_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, tokens, wte, pos, scale, T, C, n);
  check_launch(op);
}

void embedding_backward(float* dwte, float* dpos, const float* dx, const int32_t* buckets, int bucket_count,
                        float scale, int B, int T, int C) {
  const char* op = "embedding_backward";
  check_sizes(op, B, T, C);
  const int rows = B * T;
  check(bucket_count >= 0 && bucket_count <= rows, op, " (cuda): bucket_count = ", bucket_count,
        ": expected 0 <= count <= B*T = ", rows, " (bucket_tokens of these tokens)");
  if (rows == 0) return;
  check(dwte && dx && buckets, op, " (cuda): null device pointer");
  if (bucket_count > 0) {
    const int32_t* token = buckets;
    const int32_t* start = token + bucket_count;
    const int32_t* row = start + bucket_count + 1;
    embedding_wte_kernel<<<dim3(bucket_count, (C + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(
        dwte, dx, token, start, row, scale, C);
    check_launch(op);
  }
  if (dpos) {
    const size_t n = static_cast<size_t>(T) * C;
    embedding_pos_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(dpos, dx, B,
                                                                                                          T, C);
    check_launch(op);
  }
}

}  // namespace qkv::kernels::cuda
