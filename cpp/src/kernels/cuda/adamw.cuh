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
// sum_squares: sum(x^2) in double over a fixed grid of kSumBlocks blocks, each a fixed slice of x; the partial
// sums are then added in block order (on the host by sum_squares, on the device by clip_decision_kernel: the
// same order, the same bits). The grid does not depend on the GPU, so the result is the same on every run and
// every device (not the CPU's bits: its blocks differ).
// The clipped step (clipped_adam_step) decides on the device: clip_decision_kernel turns the partial sums into
// the sum s, the clipping factor (ops/clip.h, the host's definition) and whether s and the gate's sum (a step's
// losses) are finite, and the update reads them from there, doing nothing when either is not. So the update is queued
// right behind the sum, with no round trip to the host between them. This header holds the kernels (device code only)
// so that tests/cpp/emulation can run them on the CPU as well; adamw.cu launches them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/adam_plan.h"
#include "ops/clip.h"
#include "ops/types.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kAdamThreads = 256;
constexpr int kSumBlocks = 512;

// The clipped step's decision, written by clip_decision_kernel and read by adam_kernel. The two sums come first:
// clipped_adam_sums reads them.
struct ClipDecision {
  double sum_squares, gate_sum;
  AdamScalars scalars;  // the update's, grad_scale the clipping factor
  int update;           // 1: both sums finite and the plan's state lets the step run (ops/adam_plan.h)
};

// decision == nullptr: a as given. Else the decision's scalars, and no update at all where it says so.
__global__ void adam_kernel(float* p, float* m, float* v, const float* g, const ops::AdamRange* ranges, int n_ranges,
                            size_t n, AdamScalars a, const ClipDecision* decision) {
  if (decision) {
    if (!decision->update) return;
    a = decision->scalars;
  }
  const float grad_scale = a.grad_scale;
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
    const float gi = g[i] * grad_scale + l2 * p[i];
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

// One thread: the partial sums added in block order (sum_squares's order on the host), then the decision: the
// update happens when the gradients' sum and the gate's (gate_partial; null: no gate) are finite and the plan's
// state allows it (ops::adam_pick, which picks the case's scalars and counts the step in *state), with the
// clipping factor of the first. The choice is c, or *c_dev where set (a captured step's scalar block,
// exec/cuda/step_graph.h: lr and t change from step to step).
__global__ void clip_decision_kernel(ClipDecision* out, ops::AdamState* state, const double* partial,
                                     const double* gate_partial, int blocks, float max_norm, AdamChoice c,
                                     const AdamChoice* c_dev) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0, gate = 0.0;
  for (int k = 0; k < blocks; ++k) s += partial[k];
  if (gate_partial)
    for (int k = 0; k < blocks; ++k) gate += gate_partial[k];
  out->sum_squares = s;
  out->gate_sum = gate;
  if (c_dev) c = *c_dev;
  const int j = ops::adam_pick(c.ahead, c.base, c.epoch, c.halt, isfinite(s) && isfinite(gate), *state);
  out->update = j >= 0 ? 1 : 0;
  out->scalars = c.scalars[j >= 0 ? j : 0];
  out->scalars.grad_scale = j >= 0 ? ops::clip_factor(s, max_norm) : 1.f;
}

}  // namespace
}  // namespace qkv::kernels::cuda
