// The host side of the optimizer's kernels (adamw.cuh has them and their formulas): the scalars, the launches,
// the checks.
#include <cmath>
#include <vector>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

void check_adam(const char* op, int n_ranges, const AdamHyper& h) {
  check(n_ranges >= 0, op, " (cuda): n_ranges = ", n_ranges, ": expected >= 0");
  check(h.t >= 1, op, " (cuda): step t = ", h.t, ": expected >= 1 (1-based)");
}

// The partial sums of x^2 into partial (kSumBlocks doubles).
void launch_sum_squares(double* partial, const float* x, size_t n, const char* op) {
  const size_t chunk = (n + kSumBlocks - 1) / kSumBlocks;
  sum_squares_kernel<<<kSumBlocks, kAdamThreads, 0, stream()>>>(partial, x, n, chunk);
  check_launch(op);
}

}  // namespace

void adam_step(float* p, float* m, float* v, const float* g, const AdamRange* ranges, int n_ranges, size_t n,
               const AdamHyper& h) {
  const char* op = "adam_step";
  check_adam(op, n_ranges, h);
  if (n == 0 || n_ranges == 0) return;
  check(p && m && v && g && ranges, op, " (cuda): null device pointer");
  adam_kernel<<<grid_for(n, kAdamThreads), kAdamThreads, 0, stream()>>>(p, m, v, g, ranges, n_ranges, n,
                                                                        adam_scalars(h), nullptr);
  check_launch(op);
}

size_t sum_squares_scratch_size() { return kSumBlocks; }

double sum_squares(const float* x, size_t n, double* scratch) {
  const char* op = "sum_squares";
  if (n == 0) return 0.0;
  check(x && scratch, op, " (cuda): null device pointer");
  launch_sum_squares(scratch, x, n, op);
  std::vector<double> partial(kSumBlocks);
  check_cuda(cudaMemcpy(partial.data(), scratch, kSumBlocks * sizeof(double), cudaMemcpyDeviceToHost), op,
             "cudaMemcpy device to host");
  double sum = 0.0;
  for (double s : partial) sum += s;
  return sum;
}

namespace {
constexpr size_t doubles_for(size_t bytes) { return (bytes + sizeof(double) - 1) / sizeof(double); }
}  // namespace

// scratch: the partial sums of g_all, those of the gate, the decision (8-byte aligned: it follows doubles), then
// the plan's AdamState, which lives from step to step.
size_t clipped_adam_scratch_size() {
  return 2 * kSumBlocks + doubles_for(sizeof(ClipDecision)) + doubles_for(sizeof(ops::AdamState));
}
size_t clipped_adam_sums_offset() { return 2 * kSumBlocks; }  // ClipDecision's first two

void clipped_adam_step(float* p, float* m, float* v, const float* g, const float* g_all, size_t n_all,
                       const float* gate, size_t n_gate, const AdamRange* ranges, int n_ranges, size_t n,
                       const ops::AdamPlan& plan, float max_norm, double* scratch, const AdamChoice* choice_dev) {
  const char* op = "adam_step";
  check(plan.ahead >= 0 && plan.ahead <= ops::kMaxStepsAhead, op, " (cuda): ", plan.ahead,
        " steps ahead: expected 0 to ", ops::kMaxStepsAhead);
  for (int j = 0; j <= plan.ahead; ++j) check_adam(op, n_ranges, plan.hyper[j]);
  check(scratch && (n_all == 0 || g_all) && (n_gate == 0 || gate), op, " (cuda): null device pointer");
  check(n == 0 || n_ranges == 0 || (p && m && v && g && ranges), op, " (cuda): null device pointer");
  double* gate_partial = n_gate > 0 ? scratch + kSumBlocks : nullptr;
  auto* decision = reinterpret_cast<ClipDecision*>(scratch + 2 * kSumBlocks);
  if (n_all > 0) {
    launch_sum_squares(scratch, g_all, n_all, op);
  } else {
    check_cuda(cudaMemsetAsync(scratch, 0, kSumBlocks * sizeof(double), stream()), op, "cudaMemsetAsync");
  }
  if (gate_partial) launch_sum_squares(gate_partial, gate, n_gate, op);
  auto* state = reinterpret_cast<ops::AdamState*>(scratch + 2 * kSumBlocks + doubles_for(sizeof(ClipDecision)));
  const AdamChoice choice = adam_choice(plan);
  clip_decision_kernel<<<1, 1, 0, stream()>>>(decision, state, scratch, gate_partial, kSumBlocks, max_norm, choice,
                                              choice_dev);
  check_launch(op);
  if (n > 0 && n_ranges > 0) {
    adam_kernel<<<grid_for(n, kAdamThreads), kAdamThreads, 0, stream()>>>(p, m, v, g, ranges, n_ranges, n,
                                                                          choice.scalars[0], decision);
    check_launch(op);
  }
}

std::array<double, 2> clipped_adam_sums(const double* scratch) {
  check(scratch != nullptr, "adam_step (cuda): null device pointer");
  std::array<double, 2> sums{};
  const auto* decision = reinterpret_cast<const ClipDecision*>(scratch + 2 * kSumBlocks);
  check_cuda(cudaMemcpy(sums.data(), &decision->sum_squares, sizeof sums, cudaMemcpyDeviceToHost), "adam_step",
             "cudaMemcpy device to host");
  return sums;
}

}  // namespace qkv::kernels::cuda
