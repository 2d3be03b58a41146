// Token embedding (optionally scaled, as the paper's x * sqrt(d_model)) plus a position table:
//   x[b,t,:] = scale * wte[tokens[b,t],:] + pos[t,:]
// The backward scatters: dwte[token] += scale * dx, dpos[t] += dx (learned positions only). Tokens repeat, so
// the scatter is turned around into gathers with one writer per output element (no atomics, a fixed order):
//   dwte: the (B*T) rows sorted by token, stably (cub's radix sort in embedding.cu: each token's rows stay in
//         increasing order), each token's range [begin, end) of the sorted list found where the sorted token
//         changes (token_ranges_kernel), then one thread per (token, column) walks its rows in order, adding
//         scale * dx with unfused multiply and add (__fmul_rn, __fadd_rn): the CPU's loop, operation for
//         operation, so dwte matches it bit for bit. Every step of it is on the device with a grid fixed by
//         (V, B*T, C): nothing waits for the host, so a CUDA graph can hold it.
//   dpos: one thread per (t, column) walks the batch in order, likewise.
// Layout: x, dx (B,T,C); wte, dwte (V,C); pos, dpos (T_max,C), of which rows [0, T) are used; sorted tokens and
// rows (B*T); begin and end (V each), 0 for a token absent from the batch.
// This header holds the kernels (device code only) so that tests/cpp/emulation can run them on the CPU as well;
// embedding.cu launches them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kEmbeddingThreads = 256;

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

// rows[r] = r: the values the sort carries along with the tokens.
__global__ void row_index_kernel(int32_t* rows, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) rows[i] = i;
}

// Over the sorted tokens: token v's rows are sorted[begin[v] .. end[v]). begin and end are zero beforehand, so a
// token that is absent keeps the empty range [0, 0).
__global__ void token_ranges_kernel(int32_t* begin, int32_t* end, const int32_t* sorted, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int32_t v = sorted[i];
    if (i == 0 || sorted[i - 1] != v) begin[v] = i;
    if (i == n - 1 || sorted[i + 1] != v) end[v] = i + 1;
  }
}

// Block (token v, column block): dwte[v][c] += scale * dx[row][c] for each of v's rows, in increasing order.
__global__ void embedding_wte_kernel(float* dwte, const float* dx, const int32_t* begin, const int32_t* end,
                                     const int32_t* rows, float scale, int C) {
  const int v = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  const int first = begin[v], last = end[v];
  if (c >= C || first == last) return;
  float* out = dwte + static_cast<size_t>(v) * C + c;
  float acc = *out;
  for (int j = first; j < last; ++j) acc = __fadd_rn(acc, __fmul_rn(scale, dx[static_cast<size_t>(rows[j]) * C + c]));
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

}  // namespace
}  // namespace qkv::kernels::cuda
