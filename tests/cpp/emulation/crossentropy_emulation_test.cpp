// The CUDA softmax cross-entropy (kernels/cuda/crossentropy.cuh) on the warp emulator, against the CPU kernel: the
// warp-per-row kernel (every K instance of V <= 1024) and the block-per-row kernel of larger vocabularies (one read
// for the statistics, float4 loads after a ragged head, the gradient pass), with ignored rows, label smoothing,
// logits at both alignments and the gradient written in place. Launched as crossentropy.cu launches them.
// Tolerance: losses and dlogits within 1e-5 * max(1, |cpu|).
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/crossentropy.cuh"  // nvcc's #pragma unroll: -Wno-unknown-pragmas here (CMakeLists.txt)
#include "kernels/kernels.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::crossentropy_emulation_test {
namespace {

namespace kc = kernels::cuda;
using test::near;
using test::randn;

template <int K>
void warp_rows(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale, int rows, int V,
               int ignore_index, float smoothing, const float* scale_dev) {
  emu::launch({static_cast<unsigned>((rows + kc::kRowsPerBlock - 1) / kc::kRowsPerBlock), 1, 1},
              kc::kRowsPerBlock * kc::kWarp, 0, [&] {
                kc::crossentropy_warp_kernel<K>(losses, dlogits, logits, targets, scale, rows, V, ignore_index,
                                                smoothing, scale_dev);
              });
}

// crossentropy.cu's run(), emulated. scale_dev: a captured step's scale in device memory (or null).
void emulate(float* losses, float* dlogits, const float* logits, const int32_t* targets, float scale, int rows, int V,
             int ignore_index, float smoothing, const float* scale_dev) {
  const int K = (V + kc::kWarp - 1) / kc::kWarp;
  if (V > kc::kWarpMaxV) {
    const bool vec_store =
        dlogits && (reinterpret_cast<uintptr_t>(dlogits) - reinterpret_cast<uintptr_t>(logits)) % 16 == 0;
    emu::launch({static_cast<unsigned>(rows), 1, 1}, kc::kBlockThreads, 0, [&] {
      kc::crossentropy_block_kernel(losses, dlogits, logits, targets, scale, V, ignore_index, smoothing, vec_store,
                                    scale_dev);
    });
  } else if (K <= 4) {
    warp_rows<4>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  } else if (K <= 8) {
    warp_rows<8>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  } else if (K <= 16) {
    warp_rows<16>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  } else {
    warp_rows<32>(losses, dlogits, logits, targets, scale, rows, V, ignore_index, smoothing, scale_dev);
  }
}

// in_place: dlogits is logits; offset: the logits start this many floats past a 16-byte boundary;
// scale_from_device: the scale comes from device memory, as in a captured step (the launch's is then NaN).
void check_case(int rows, int V, float smoothing, bool in_place, int offset, uint64_t seed,
                bool scale_from_device = false) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " V " << V << " smoothing " << smoothing
                                    << (in_place ? " in place" : "") << " offset " << offset);
  const size_t n = static_cast<size_t>(rows) * V;
  auto logits = randn(n, seed, 3.f);
  logits[0] = 40.f;  // a large logit: the max must be subtracted
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  Rng rng(seed + 1);
  for (auto& t : targets) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
  const int ignore = -100;
  if (rows > 1) targets[1] = ignore;
  targets[0] = V - 1;  // the last logit
  const float scale = 1.f / static_cast<float>(rows);
  std::vector<float> want_losses(static_cast<size_t>(rows)), want_d(n);
  kernels::crossentropy_forward_backward(want_losses, want_d, logits, targets.data(), scale, rows, V, ignore,
                                         smoothing);

  std::vector<float> buf(n + 8, std::nanf("")), dbuf(n + 8, std::nanf(""));
  std::copy(logits.begin(), logits.end(), buf.begin() + offset);
  float* z = buf.data() + offset;
  float* d = in_place ? z : dbuf.data() + 1;  // a separate gradient at another alignment: scalar stores
  std::vector<float> losses(static_cast<size_t>(rows), std::nanf(""));
  if (scale_from_device) {
    emulate(losses.data(), d, z, targets.data(), std::nanf(""), rows, V, ignore, smoothing, &scale);
  } else {
    emulate(losses.data(), d, z, targets.data(), scale, rows, V, ignore, smoothing, nullptr);
  }
  EXPECT_TRUE(near("losses", losses, want_losses, 1e-5, true));
  EXPECT_TRUE(near("dlogits", std::vector<float>(d, d + n), want_d, 1e-5, true));
}

TEST(CrossEntropyEmulated, WarpPerRowEveryInstance) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 10;
  for (int V : {1, 65, 200, 511, 1024})  // K = 1 (-> 4), 3 (-> 4), 7 (-> 8), 16, 32
    for (float smoothing : {0.f, 0.1f}) check_case(9, V, smoothing, V % 2 == 1, 0, seed += 10);
}

TEST(CrossEntropyEmulated, BlockPerRowLargeVocabularies) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 100;
  for (int V : {1025, 4099, 10000})
    for (int offset : {0, 1, 3}) check_case(3, V, offset == 1 ? 0.1f : 0.f, offset != 3, offset, seed += 10);
}

// A captured training step's 1/count changes with its targets: the kernels read it from the step's scalar block.
TEST(CrossEntropyEmulated, TheScaleOfACapturedStepComesFromDeviceMemory) {
  QKV_SKIP_UNDER_ASAN();
  check_case(5, 200, 0.1f, true, 0, 300, true);  // warp per row
  check_case(3, 4099, 0.f, true, 0, 310, true);  // block per row
}

}  // namespace
}  // namespace qkv::crossentropy_emulation_test
