// The elementwise and copying ops: plain loops the compiler vectorises, split over the thread pool when large.
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {
namespace {

// Below this many elements a loop runs on the calling thread: the pool's hand-off would cost more.
constexpr size_t kSerial = 1 << 15;

}  // namespace

void add(Span out, CSpan a, CSpan b) {
  check(a.size() >= out.size() && b.size() >= out.size(), "add: inputs of ", a.size(), " and ", b.size(),
        " elements for an output of ", out.size());
  const auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      out[static_cast<size_t>(i)] = a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
  };
  if (out.size() < kSerial)
    run(0, static_cast<int64_t>(out.size()));
  else
    parallel_for(static_cast<int64_t>(out.size()), run);
}

void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * ld_dst, src + static_cast<size_t>(r) * ld_src,
                static_cast<size_t>(cols) * sizeof(float));
}

void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) {
  for (int r = 0; r < rows; ++r) {
    const float* z = logits.data() + static_cast<size_t>(r) * V;
    int b = 0;
    for (int v = 1; v < V; ++v)
      if (z[v] > z[b]) b = v;
    best[static_cast<size_t>(r)] = b;
  }
}

}  // namespace qkv::kernels
