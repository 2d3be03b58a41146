// Bias + activation, the epilogue of a Linear layer (kernels.h: Act), and dropout, the other elementwise op:
// both are one pass over a buffer.
//   Identity: h += b
//   ReLU: a = max(h, 0);  dh = h > 0 ? da : 0   (PyTorch's choice at 0; a select, so 0 * inf is not NaN)
//     reference: https://pytorch.org/docs/stable/generated/torch.nn.ReLU.html
//   GELU, exact: a = h * Phi(h), Phi(h) = (1 + erf(h / sqrt(2))) / 2;  dh = da * (Phi(h) + h * phi(h)),
//     phi(h) = exp(-h^2/2) / sqrt(2 pi).  reference: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html
//   GELUTanh (approximate='tanh', GPT-2's gelu_new): a = h sigma(z), z = 2u, u = sqrt(2/pi) (h + 0.044715 h^3)
//     (= 0.5 h (1 + tanh(u)), without 1 + tanh's cancellation for negative h); dh = da * (sigma + h z' sigma
//     (1 - sigma)), the CPU's formulas (kernels/cpu/rowwise_simd.h: gelu_tanh), h clamped to [-10, 10] in the h z'
//     term so that h^3 cannot overflow into inf * 0. Past |h| ~ 10 exactly h or 0, the derivative 1 or 0.
//   Dropout (inverted): y = hash(seed, i) >= p * 2^32 ? x / (1 - p) : 0, the CPU's hash (dropout_hash.h).
//     reference: https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html
// Layout: h, a, da, dh (rows, N); b, db (N). Each element is read and written by one thread (four consecutive
// elements a thread where N is a multiple of 4 and the buffers 16-byte aligned): dh may alias da, a may alias h
// (Identity), y may alias x.
// db: one thread per (block of 32 rows, column) writes dh for its rows and sums them (common.cuh), so the
// backward is one pass over da and h whether or not dh is wanted.
#include <cstdint>

#include "kernels/cuda/bias_act.cuh"  // the bias + activation kernels
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dropout_hash.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__global__ void dropout_kernel(float* out, const float* in, size_t n, uint32_t threshold, float scale, uint64_t seed,
                               const uint64_t* seed_dev) {
  seed = step_value(seed, seed_dev);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = dropout_hash(seed, i) >= threshold ? in[i] * scale : 0.f;
}

void check_sizes(const char* op, int rows, int N) {
  check(rows >= 0, op, " (cuda): rows = ", rows, ": expected >= 0");
  check(N > 0, op, " (cuda): N = ", N, ": expected > 0");
}

void dropout(const char* op, float* out, const float* in, size_t n, float p, uint64_t seed, const uint64_t* seed_dev) {
  check(p >= 0.f && p <= 1.f, op, " (cuda): p = ", p, ": expected 0 <= p <= 1");
  if (n == 0) return;
  check(out && in, op, " (cuda): null device pointer");
  dropout_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(out, in, n, dropout_threshold(p), 1.f / (1.f - p),
                                                                   seed, seed_dev);
  check_launch(op);
}

}  // namespace

void bias_act_forward(float* a, float* h, const float* b, Act act, int rows, int N) {
  const char* op = "bias_act_forward";
  check_sizes(op, rows, N);
  if (rows == 0) return;
  check(a && h, op, " (cuda): null device pointer");
  const size_t n = static_cast<size_t>(rows) * N;
  if (N % 4 == 0 && aligned16(a) && aligned16(h) && (!b || aligned16(b)))
    bias_act_forward_kernel<4><<<grid_for(n / 4, kThreads), kThreads, 0, stream()>>>(a, h, b, act, n, N);
  else
    bias_act_forward_kernel<1><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(a, h, b, act, n, N);
  check_launch(op);
}

size_t bias_act_backward_scratch_size(int rows, int N) {
  return static_cast<size_t>(column_blocks(rows)) * static_cast<size_t>(N);
}

void bias_act_backward(float* dh, float* db, float* scratch, const float* da, const float* h, Act act, int rows,
                       int N) {
  const char* op = "bias_act_backward";
  check_sizes(op, rows, N);
  if (rows == 0) return;
  check(da && (h || act == Act::Identity), op, " (cuda): null device pointer");
  if (!db) {
    if (!dh) return;
    const size_t n = static_cast<size_t>(rows) * N;
    if (n % 4 == 0 && aligned16(dh) && aligned16(da) && (!h || aligned16(h)))
      bias_act_backward_kernel<4><<<grid_for(n / 4, kThreads), kThreads, 0, stream()>>>(dh, da, h, act, n);
    else
      bias_act_backward_kernel<1><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(dh, da, h, act, n);
    check_launch(op);
    return;
  }
  check(scratch != nullptr, op, " (cuda): scratch is null (bias_act_backward_scratch_size floats)");
  const int blocks = column_blocks(rows);
  bias_act_columns_kernel<<<dim3(blocks, (N + kColumnThreads - 1) / kColumnThreads), kColumnThreads, 0, stream()>>>(
      scratch, dh, da, h, act, rows, N);
  check_launch(op);
  add_column_sums(db, scratch, blocks, N, N, op);
}

void dropout_forward(float* y, const float* x, size_t n, float p, uint64_t seed, const uint64_t* seed_dev) {
  dropout("dropout_forward", y, x, n, p, seed, seed_dev);
}
void dropout_backward(float* dx, const float* dy, size_t n, float p, uint64_t seed, const uint64_t* seed_dev) {
  dropout("dropout_backward", dx, dy, n, p, seed, seed_dev);
}

}  // namespace qkv::kernels::cuda
