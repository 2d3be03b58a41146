// Adam and AdamW as torch.optim does them, in one pass over a model's flat parameter buffers, and the sum of
// squares behind global-norm gradient clipping.
// reference: https://pytorch.org/docs/stable/generated/torch.optim.Adam.html
// reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
//   g' = grad_scale * g                     (clip_grad_norm_'s scaling, folded in: g itself is not written)
//   AdamW: p *= 1 - lr * wd (decoupled, before the update);  Adam: g' += wd * p (L2 in the gradient)
//   m = b1 m + (1-b1) g',  v = b2 v + (1-b2) g'^2
//   p -= lr / (1-b1^t) * (m / (sqrt(v) / sqrt(1-b2^t) + eps))
// The scalars are computed as kernels/cpu/adamw.cpp does (in double, then rounded to float); 1 - lr * wd is
// formed per range on the device in double with unfused multiply and add, the CPU's rounding.
// Layout: p, m, v, g (n) flat; ranges (n_ranges) sorted and disjoint, each with its weight decay; elements
// outside every range are left alone. One thread per element finds its range by binary search (a model
// has tens of ranges): one launch per step, whatever the number of tensors.
//
// sum_squares: sum(x^2) in double over a fixed grid of kSumBlocks blocks, each a fixed slice of x; the
// partial sums come back to the host and are added in block order. The grid does not depend on the GPU, so
// the result is the same on every run and every device (not the CPU's bits: its blocks differ).
#include <cmath>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSumBlocks = 512;

struct AdamScalars {
  float grad_scale, beta1, beta2, step, sqrt_bc2, eps, lr;
  bool decoupled;
};

__global__ void adam_kernel(float* p, float* m, float* v, const float* g, const AdamRange* ranges, int n_ranges,
                            size_t n, AdamScalars a) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // The first range whose end is past i.
    int lo = 0, hi = n_ranges;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (ranges[mid].end <= i) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == n_ranges || ranges[lo].begin > i) continue;  // in a gap between ranges
    const float wd = ranges[lo].weight_decay;
    const float l2 = a.decoupled ? 0.f : wd;
    const float shrink =
        static_cast<float>(__dadd_rn(1.0, a.decoupled ? -__dmul_rn(static_cast<double>(a.lr), wd) : 0.0));
    const float gi = g[i] * a.grad_scale + l2 * p[i];
    float pi = p[i] * shrink;
    const float mi = a.beta1 * m[i] + (1.f - a.beta1) * gi;
    const float vi = a.beta2 * v[i] + (1.f - a.beta2) * gi * gi;
    pi -= a.step * (mi / (sqrtf(vi) / a.sqrt_bc2 + a.eps));
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// partial[k] = sum of x[i]^2 over block k's slice [k * chunk, min(n, (k + 1) * chunk)).
__global__ void sum_squares_kernel(double* partial, const float* x, size_t n, size_t chunk) {
  const size_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  double s = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  s = block_reduce(s, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

}  // namespace

void adam_step(float* p, float* m, float* v, const float* g, const AdamRange* ranges, int n_ranges, size_t n,
               const AdamHyper& h) {
  const char* op = "adam_step";
  check(n_ranges >= 0, op, " (cuda): n_ranges = ", n_ranges, ": expected >= 0");
  check(h.t >= 1, op, " (cuda): step t = ", h.t, ": expected >= 1 (1-based)");
  if (n == 0 || n_ranges == 0) return;
  check(p && m && v && g && ranges, op, " (cuda): null device pointer");
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), h.t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), h.t);
  const AdamScalars a{
      h.grad_scale, h.beta1, h.beta2,    static_cast<float>(h.lr / bc1), static_cast<float>(std::sqrt(bc2)),
      h.eps,        h.lr,    h.decoupled};
  adam_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(p, m, v, g, ranges, n_ranges, n, a);
  check_launch(op);
}

size_t sum_squares_scratch_size() { return kSumBlocks; }

double sum_squares(const float* x, size_t n, double* scratch) {
  const char* op = "sum_squares";
  if (n == 0) return 0.0;
  check(x && scratch, op, " (cuda): null device pointer");
  const size_t chunk = (n + kSumBlocks - 1) / kSumBlocks;
  sum_squares_kernel<<<kSumBlocks, kThreads, 0, stream()>>>(scratch, x, n, chunk);
  check_launch(op);
  std::vector<double> partial(kSumBlocks);
  check_cuda(cudaMemcpy(partial.data(), scratch, kSumBlocks * sizeof(double), cudaMemcpyDeviceToHost), op,
             "cudaMemcpy device to host");
  double sum = 0.0;
  for (double s : partial) sum += s;
  return sum;
}

}  // namespace qkv::kernels::cuda
