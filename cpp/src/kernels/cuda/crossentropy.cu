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
//   larger V: one block per row: a max pass, a sum-of-exp pass, (a smoothing pass), then the gradient pass;
//     the row (V floats) stays in L1/L2 between them.
// dlogits may alias logits: every thread has finished reading the row (a barrier, or the registers) before
// any writes, and then each thread writes only the elements it reads.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void crossentropy_kernel(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                    float scale, int V, int ignore_index, float smoothing) {
  const int row = blockIdx.x;
  const float* z = logits + static_cast<size_t>(row) * V;
  float* d = dlogits ? dlogits + static_cast<size_t>(row) * V : nullptr;
  const int t = targets[row];
  if (t == ignore_index) {  // the whole block takes this branch: no barrier is skipped by part of it
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (d)
      for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = 0.f;
    return;
  }
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, z[i]);
  mx = block_reduce(mx, MaxOp{}, -INFINITY);
  float sum = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(z[i] - mx);
  sum = block_reduce(sum, SumOp{}, 0.f);
  const float lse = logf(sum) + mx;
  const float uniform = smoothing / static_cast<float>(V);
  float loss = (1.f - smoothing) * (lse - z[t]);
  if (smoothing > 0.f) {
    float all = 0.f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) all += lse - z[i];
    loss += uniform * block_reduce(all, SumOp{}, 0.f);
  }
  if (threadIdx.x == 0) losses[row] = loss;
  if (!d) return;
  __syncthreads();  // every thread has read z[t] (the loss) before d, which may be z, is written
  const float inv = 1.f / sum;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float di = scale * (expf(z[i] - mx) * inv - uniform);
    if (i == t) di -= scale * (1.f - smoothing);
    d[i] = di;
  }
}

constexpr int kWarpMaxV = 1024;
constexpr int kRowsPerBlock = 8;

// A warp per row; K = ceil(V / 32) values per lane kept in registers (lane j holds z[j], z[j + 32], ...).
template <int K>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    crossentropy_warp_kernel(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale,
                             int rows, int V, int ignore_index, float smoothing) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: no shuffle is left half-way
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

template <int K>
void launch_warp(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale, int rows,
                 int V, int ignore_index, float smoothing) {
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  crossentropy_warp_kernel<K>
      <<<blocks, kRowsPerBlock * kWarp>>>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing);
}

void run(const char* op, float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale,
         int rows, int V, int ignore_index, float smoothing) {
  check(rows >= 0, op, " (cuda): rows = ", rows, ": expected >= 0");
  check(V > 0, op, " (cuda): V = ", V, ": expected > 0");
  check(smoothing >= 0.f && smoothing <= 1.f, op, " (cuda): label smoothing = ", smoothing,
        ": expected 0 <= smoothing <= 1");
  if (rows == 0) return;
  check(losses && logits && targets, op, " (cuda): null device pointer");
  const int K = (V + kWarp - 1) / kWarp;
  if (V > kWarpMaxV)
    crossentropy_kernel<<<rows, kThreads>>>(losses, dlogits, logits, targets, scale, V, ignore_index, smoothing);
  else if (K <= 4)
    launch_warp<4>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing);
  else if (K <= 8)
    launch_warp<8>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing);
  else if (K <= 16)
    launch_warp<16>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing);
  else
    launch_warp<32>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing);
  check_launch(op);
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int rows, int V, int ignore_index,
                          float smoothing) {
  run("crossentropy_forward", losses, nullptr, logits, targets, 0.f, rows, V, ignore_index, smoothing);
}

void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                   float scale, int rows, int V, int ignore_index, float smoothing) {
  check(dlogits != nullptr, "crossentropy_forward_backward (cuda): dlogits is null");
  run("crossentropy_forward_backward", losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing);
}

}  // namespace qkv::kernels::cuda
