// The host side of the softmax cross-entropy (crossentropy.cuh has the kernels and their description): the
// choice of kernel by vocabulary size, the launches, the checks (kernels.h: crossentropy_*).
#include "kernels/cuda/crossentropy.cuh"
#include "qkv/error.h"

namespace qkv::kernels::cuda {
namespace {

template <int K>
void launch_warp(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale, int rows,
                 int V, int ignore_index, float smoothing, const float* scale_dev) {
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  crossentropy_warp_kernel<K><<<blocks, kRowsPerBlock * kWarp, 0, stream()>>>(
      losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
}

void run(const char* op, float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale,
         int rows, int V, int ignore_index, float smoothing, const float* scale_dev) {
  check(rows >= 0, op, " (cuda): rows = ", rows, ": expected >= 0");
  check(V > 0, op, " (cuda): V = ", V, ": expected > 0");
  check(smoothing >= 0.f && smoothing <= 1.f, op, " (cuda): label smoothing = ", smoothing,
        ": expected 0 <= smoothing <= 1");
  if (rows == 0) return;
  check(losses && logits && targets, op, " (cuda): null device pointer");
  const int K = (V + kWarp - 1) / kWarp;
  if (V > kWarpMaxV) {
    const bool vec_store =
        dlogits && (reinterpret_cast<uintptr_t>(dlogits) - reinterpret_cast<uintptr_t>(logits)) % 16 == 0;
    crossentropy_block_kernel<<<rows, kBlockThreads, 0, stream()>>>(losses, dlogits, logits, targets, scale, V,
                                                                    ignore_index, smoothing, vec_store, scale_dev);
  } else if (K <= 4)
    launch_warp<4>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  else if (K <= 8)
    launch_warp<8>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  else if (K <= 16)
    launch_warp<16>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  else
    launch_warp<32>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  check_launch(op);
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int rows, int V, int ignore_index,
                          float smoothing) {
  run("crossentropy_forward", losses, nullptr, logits, targets, 0.f, rows, V, ignore_index, smoothing, nullptr);
}

void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                   float scale, int rows, int V, int ignore_index, float smoothing,
                                   const float* scale_dev) {
  check(dlogits != nullptr, "crossentropy_forward_backward (cuda): dlogits is null");
  run("crossentropy_forward_backward", losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing,
      scale_dev);
}

}  // namespace qkv::kernels::cuda
