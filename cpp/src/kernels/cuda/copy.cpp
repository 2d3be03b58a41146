// Host <-> device copies, and the host-side check that keeps bad ids off the GPU (cuda_kernels.h).
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/stream.h"
#include "qkv/error.h"

namespace qkv::kernels::cuda {

void upload(float* dst, std::span<const float> src, const char* op) {
  if (src.empty()) return;
  check(dst != nullptr, op, " (cuda): upload of ", src.size(), " floats to a null device pointer");
  check_cuda(cudaMemcpy(dst, src.data(), src.size_bytes(), cudaMemcpyHostToDevice), op, "cudaMemcpy host to device");
}

void download(std::span<float> dst, const float* src, const char* op) {
  if (dst.empty()) return;
  check(src != nullptr, op, " (cuda): download of ", dst.size(), " floats from a null device pointer");
  check_cuda(cudaMemcpy(dst.data(), src, dst.size_bytes(), cudaMemcpyDeviceToHost), op, "cudaMemcpy device to host");
}

void check_ids(std::span<const int32_t> ids, int limit, std::optional<int> ignore_index, const char* op,
               const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if ((id < 0 || id >= limit) && id != ignore_index)
      throw Error(detail::cat(op, ": ", what, "[", i, "] = ", id, " is out of range: expected 0 <= id < ", limit,
                              ignore_index ? detail::cat(" or ignore_index ", *ignore_index) : std::string()));
  }
}

void upload_ids(int32_t* dst, std::span<const int32_t> ids, int limit, std::optional<int> ignore_index, const char* op,
                const char* what) {
  check_ids(ids, limit, ignore_index, op, what);  // before any CUDA call
  if (ids.empty()) return;
  check(dst != nullptr, op, " (cuda): upload of ", ids.size(), " ids to a null device pointer");
  check_cuda(cudaMemcpy(dst, ids.data(), ids.size_bytes(), cudaMemcpyHostToDevice), op, "cudaMemcpy host to device");
}

void upload_ranges(AdamRange* dst, std::span<const AdamRange> ranges, const char* op) {
  for (size_t i = 0; i < ranges.size(); ++i) {
    check(ranges[i].begin <= ranges[i].end && (i == 0 || ranges[i - 1].end <= ranges[i].begin), op,
          ": Adam ranges must be sorted and disjoint: range ", i, " is [", ranges[i].begin, ", ", ranges[i].end, ")");
  }
  if (ranges.empty()) return;
  check(dst != nullptr, op, " (cuda): upload of ", ranges.size(), " ranges to a null device pointer");
  // Asynchronous from pageable memory: CUDA copies the bytes to its staging memory before returning (so the
  // caller may reuse them) and does not wait for the work queued before it (the backward, in a training step).
  check_cuda(cudaMemcpyAsync(dst, ranges.data(), ranges.size_bytes(), cudaMemcpyHostToDevice, stream()), op,
             "cudaMemcpyAsync host to device");
}

void synchronize(const char* op) { check_cuda(cudaDeviceSynchronize(), op, "cudaDeviceSynchronize"); }

}  // namespace qkv::kernels::cuda
