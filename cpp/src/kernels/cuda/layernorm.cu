// The host side of LayerNorm (layernorm.cuh has the kernels and their description): the instance per row width,
// the launches, the checks (kernels.h: layernorm_*; cuda_kernels.h: add_column_sums).
#include "kernels/cuda/layernorm.cuh"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

void launch_column_sums(float* out0, float* out1, const float* partial, int blocks, int N, int stride, const char* op) {
  const int total = out1 ? 2 * N : N;
  add_column_sums_kernel<<<(total + kSumColumns - 1) / kSumColumns, kThreads, 0, stream()>>>(out0, out1, partial,
                                                                                             blocks, N, stride);
  check_launch(op);
}

// The fused backward for one (K, vectorised) instance: one block per 32-row group.
template <int K, bool kVec>
void launch_backward(float* partial, float* dx, const float* dr, const float* dy, const float* x, const float* w,
                     const float* mean, const float* rstd, int rows, int C, const char* op) {
  const size_t smem = 2 * static_cast<size_t>(kTileRows) * C * sizeof(float);  // at most 64 KiB (C = 1024)
  // Past the default limit (C > 768): opt in, on every call (the current device's), to the most this instance
  // takes (C = 4 * 32 * K), so that two threads launching it for different C cannot lower each other's.
  constexpr size_t kMost = 2 * static_cast<size_t>(kTileRows) * 4 * kWarp * K * sizeof(float);
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(layernorm_backward_kernel<K, kVec>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kMost)),
               op, "cudaFuncSetAttribute");
  layernorm_backward_kernel<K, kVec>
      <<<column_blocks(rows), kThreads, smem, stream()>>>(partial, dx, dr, dy, x, w, mean, rstd, rows, C);
  check_launch(op);
}

template <bool kVec>
void launch_backward_for_c(float* partial, float* dx, const float* dr, const float* dy, const float* x, const float* w,
                           const float* mean, const float* rstd, int rows, int C, const char* op) {
  const int k = (C + 4 * kWarp - 1) / (4 * kWarp);  // float4's a lane
  if (k <= 1)
    launch_backward<1, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C, op);
  else if (k <= 2)
    launch_backward<2, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C, op);
  else if (k <= 3)
    launch_backward<3, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C, op);
  else if (k <= 4)
    launch_backward<4, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C, op);
  else if (k <= 6)
    launch_backward<6, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C, op);
  else
    launch_backward<kFusedMaxK, kVec>(partial, dx, dr, dy, x, w, mean, rstd, rows, C, op);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_sizes(const char* op, int rows, int C) {
  check(rows >= 0, op, " (cuda): rows = ", rows, ": expected >= 0");
  check(C > 0, op, " (cuda): C = ", C, ": expected > 0");
}

void forward(const char* op, float* y, float* mean, float* rstd, float* r, const float* x, const float* f,
             const float* w, const float* b, int rows, int C) {
  check_sizes(op, rows, C);
  if (rows == 0) return;
  check(y && mean && rstd && x && w && b && (!f || r), op, " (cuda): null device pointer");
  layernorm_forward_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream()>>>(y, mean, rstd, r, x,
                                                                                                  f, w, b, rows, C);
  check_launch(op);
}

}  // namespace

void add_column_sums(float* out, const float* partial, int blocks, int N, int stride, const char* op) {
  if (!out || N == 0 || blocks == 0) return;
  launch_column_sums(out, nullptr, partial, blocks, N, stride, op);
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
  if (C <= kFusedMaxC) {
    // float4 rows when every row of every (C)-strided buffer starts 16-byte aligned.
    const bool vec =
        C % 4 == 0 && aligned16(dx) && (!dr || aligned16(dr)) && aligned16(dy) && aligned16(x) && aligned16(w);
    if (vec)
      launch_backward_for_c<true>(scratch, dx, dr, dy, x, w, mean, rstd, rows, C, op);
    else
      launch_backward_for_c<false>(scratch, dx, dr, dy, x, w, mean, rstd, rows, C, op);
  } else {
    // The column sums first: they read dy and x, which the contract lets no output alias, so order is free.
    layernorm_columns_kernel<<<dim3(blocks, (C + kColumnThreads - 1) / kColumnThreads), kColumnThreads, 0, stream()>>>(
        scratch, dy, x, mean, rstd, rows, C);
    check_launch(op);
    layernorm_backward_wide_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream()>>>(
        dx, dr, dy, x, w, mean, rstd, rows, C);
    check_launch(op);
  }
  launch_column_sums(dw, db, scratch, blocks, C, 2 * C, op);  // scratch (blocks, 2C) = [dw part | db part] a row
}

}  // namespace qkv::kernels::cuda
