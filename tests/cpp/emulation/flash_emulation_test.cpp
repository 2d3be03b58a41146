// The tensor-core attention kernels (kernels/cuda/flash_attention.cuh), run on the CPU by the warp emulator
// (warp_emulation.h: every thread a fiber, real barriers, the mma.sync and cvt.rna.tf32 semantics of the PTX ISA),
// against the reference executor (exec/reference/reference_backend.cpp: plain loops, dot products in double). These run
// in every build, with or without CUDA or a GPU: they check the kernels' indices, tile bounds, masks, fragment layouts,
// online softmax, recomputation from lse and the dropout mask as written. The GPU tests
// (tests/cpp/cuda/flash_attention_test.cpp) check the same on the hardware, with its rounding and its memory.
// Tolerances: 3xTF32 (fp32 mode) within 1e-5 * max(1, |ref|) element by element, as on the GPU; TF32 and bf16
// within kAttentionTf32Tolerance and kAttentionBf16Tolerance of each output's largest |value| (at least 1).
// Shapes are kept small (every thread is a fiber: a block of the backward takes a few hundred thousand switches).
#define QKV_WARP_EMULATION 1
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "attention_cases.h"
#include "emulation/test_support.h"
#include "emulation/warp_emulation.h"
#include "kernels/cuda/flash_attention.cuh"  // nvcc's #pragma unroll: -Wno-unknown-pragmas here (CMakeLists.txt)
#include "ops/backends.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::flash_emulation_test {
namespace {

namespace kc = kernels::cuda;
using test::dkv_columns;
using test::dq_columns;
using test::flash_reference;
using test::FlashCase;
using test::FlashInputs;
using test::FlashOutputs;
using test::near;

// The three kernels as flash_attention.cu launches them (grid (ceil(rows / 64), H, B), 128 threads), emulated.
// Seed::Device: the dropout seed read from device memory, as a captured step's (the launch's is then another);
// Seed::Other: that other seed alone.
enum class Seed { Launch, Device, Other };
template <int D, kc::AttentionPrecision kP>
FlashOutputs emulate(const FlashCase& c, const FlashInputs& in, Seed from = Seed::Launch) {
  kernels::AttentionShape s = in.shape(c, in.pad.data());
  const uint64_t seed = s.seed;
  if (from != Seed::Launch) s.seed = ~seed;
  if (from == Seed::Device) s.seed_device = &seed;
  kc::FlashParams fp{kc::attention_params(s), in.C % 4 == 0 && in.ldq % 4 == 0 && in.ldkv % 4 == 0};
  const float nan = std::nanf("");
  FlashOutputs o;
  o.out.assign(static_cast<size_t>(c.B) * c.Tq * in.C, nan);
  o.lse.assign(static_cast<size_t>(c.B) * c.H * c.Tq, nan);
  o.dq.assign(in.q.size(), nan);
  o.dkv.assign(in.kv.size(), nan);
  std::vector<float> Dg(static_cast<size_t>(c.B) * c.H * c.Tq, nan);
  const auto grid = [&](int rows) {
    return emu::Dim3{static_cast<unsigned>((rows + kc::kOwn - 1) / kc::kOwn), static_cast<unsigned>(c.H),
                     static_cast<unsigned>(c.B)};
  };
  const float *q = in.q.data(), *k = in.kv.data(), *v = in.kv.data() + in.C;
  emu::launch(grid(c.Tq), kc::kThreads, kc::forward_smem(D),
              [&] { kc::flash_forward_kernel<D, kP>(o.out.data(), o.lse.data(), q, k, v, fp); });
  emu::launch(grid(c.Tq), kc::kThreads, kc::dq_smem(D), [&] {
    kc::flash_dq_kernel<D, kP>(o.dq.data(), Dg.data(), in.dout.data(), q, k, v, o.out.data(), o.lse.data(), fp);
  });
  emu::launch(grid(c.Tk), kc::kThreads, kc::dkv_smem(D), [&] {
    kc::flash_dkv_kernel<D, kP>(o.dkv.data(), o.dkv.data() + in.C, Dg.data(), in.dout.data(), q, k, v, o.lse.data(),
                                fp);
  });
  return o;
}

template <int D>
void check_case(const FlashCase& c, uint64_t seed, bool aligned = false) {
  SCOPED_TRACE(::testing::Message() << "B " << c.B << " Tq " << c.Tq << " Tk " << c.Tk << " H " << c.H << " hs " << c.hs
                                    << " causal " << c.causal << " pad " << c.pad << " dropout " << c.dropout
                                    << " q_pos " << c.q_pos << " k_rows " << c.Tk + c.extra_rows
                                    << (aligned ? " float4 loads" : " scalar loads"));
  const FlashInputs in(c, seed, aligned);
  const FlashOutputs want = flash_reference(c, in);
  using P = kc::AttentionPrecision;
  for (P precision : {P::Fp32, P::Tf32, P::Bf16}) {
    const bool fp32 = precision == P::Fp32;
    SCOPED_TRACE(fp32 ? "fp32 (3xTF32)" : precision == P::Tf32 ? "tf32" : "bf16");
    const FlashOutputs got = fp32                   ? emulate<D, P::Fp32>(c, in)
                             : precision == P::Tf32 ? emulate<D, P::Tf32>(c, in)
                                                    : emulate<D, P::Bf16>(c, in);
    const double tol = fp32 ? 1e-5 : precision == P::Tf32 ? kc::kAttentionTf32Tolerance : kc::kAttentionBf16Tolerance;
    EXPECT_TRUE(near("out", got.out, want.out, tol, fp32));
    EXPECT_TRUE(near("lse", got.lse, want.lse, tol, fp32));
    EXPECT_TRUE(near("dq", dq_columns(c, in, got.dq), dq_columns(c, in, want.dq), tol, fp32));
    EXPECT_TRUE(near("dk and dv", dkv_columns(c, in, got.dkv), dkv_columns(c, in, want.dkv), tol, fp32));
  }
}

// A captured training step's dropout seed changes at every replay: the three kernels read it from the step's
// scalar block where the shape says so, and the masks are those of that seed, bit for bit.
TEST(FlashAttentionEmulated, TheSeedOfACapturedStepComesFromDeviceMemory) {
  QKV_SKIP_UNDER_ASAN();
  const FlashCase c{1, 33, 40, 1, 64, true, false, 0.3f};
  const FlashInputs in(c, 400);
  using P = kc::AttentionPrecision;
  const FlashOutputs want = emulate<64, P::Fp32>(c, in), got = emulate<64, P::Fp32>(c, in, Seed::Device);
  // Bit for bit (the unwritten columns past C hold the same NaN in both).
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(got.out, want.out));
  EXPECT_TRUE(same(got.lse, want.lse));
  EXPECT_TRUE(same(got.dq, want.dq));
  EXPECT_TRUE(same(got.dkv, want.dkv));
  // The launch's own seed gives other masks: a kernel that ignored the block would fail the checks above.
  const FlashOutputs other = emulate<64, P::Fp32>(c, in, Seed::Other);
  EXPECT_FALSE(same(other.out, want.out));
  EXPECT_FALSE(same(other.dq, want.dq));
}

// The emulator itself: cvt.rna.tf32's rounding and one mma against a plain product.
TEST(WarpEmulation, Tf32RoundingAndOneMma) {
  EXPECT_EQ(kc::to_tf32(1.f), 0x3f800000u);
  EXPECT_EQ(__uint_as_float(kc::to_tf32(1.f + 0x1p-11f)), 1.f + 0x1p-10f);  // a tie: away from zero
  EXPECT_EQ(__uint_as_float(kc::to_tf32(-(1.f + 0x1p-11f))), -(1.f + 0x1p-10f));
  EXPECT_EQ(__uint_as_float(kc::to_tf32(1.f + 0x1p-12f)), 1.f);
  EXPECT_TRUE(std::isinf(__uint_as_float(kc::to_tf32(INFINITY))));
  QKV_SKIP_UNDER_ASAN();
  // A (16x8) = r + 0.5 k, B (8x8) = k - n: the C fragments against the plain sums.
  std::vector<float> d(32 * 4);
  emu::launch({1, 1, 1}, 32, 0, [&] {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    const auto A = [](int r, int k) { return static_cast<float>(r) + 0.5f * static_cast<float>(k); };
    const auto B = [](int k, int n) { return static_cast<float>(k - n); };
    const uint32_t a[4] = {kc::to_tf32(A(g, t)), kc::to_tf32(A(g + 8, t)), kc::to_tf32(A(g, t + 4)),
                           kc::to_tf32(A(g + 8, t + 4))};
    const uint32_t b[2] = {kc::to_tf32(B(t, g)), kc::to_tf32(B(t + 4, g))};
    float c[4] = {1.f, 1.f, 1.f, 1.f};
    kc::mma_tf32(c, a, b);
    for (int i = 0; i < 4; ++i) d[static_cast<size_t>(lane * 4 + i)] = c[i];
  });
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int r = lane / 4 + (i >= 2 ? 8 : 0), n = 2 * (lane % 4) + (i & 1);
      double want = 1;
      for (int k = 0; k < 8; ++k) want += (r + 0.5 * k) * (k - n);
      EXPECT_EQ(d[static_cast<size_t>(lane * 4 + i)], static_cast<float>(want)) << "lane " << lane << " element " << i;
    }
}

// One bf16 mma against a plain product of the rounded values, and the rounding (to nearest, ties to even).
TEST(WarpEmulation, Bf16RoundingAndOneMma) {
  EXPECT_EQ(kc::pack_bf16(1.f, -2.f), 0xc0003f80u);                               // lo in the low half
  EXPECT_EQ(kc::bf16_half(kc::pack_bf16(1.f + 0x1p-8f, 0.f), 0), 1.f);            // a tie: to even (down)
  EXPECT_EQ(kc::bf16_half(kc::pack_bf16(1.f + 0x3p-8f, 0.f), 0), 1.f + 0x1p-6f);  // a tie: to even (up)
  EXPECT_EQ(kc::bf16_half(kc::pack_bf16(0.f, 1.f + 0x1p-9f), 1), 1.f);
  QKV_SKIP_UNDER_ASAN();
  std::vector<float> d(32 * 4);
  const auto A = [](int r, int k) { return 0.25f * static_cast<float>(r) - 0.125f * static_cast<float>(k); };
  const auto B = [](int k, int n) { return static_cast<float>(k + 2 * n) * 0.5f; };
  emu::launch({1, 1, 1}, 32, 0, [&] {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    const uint32_t a[4] = {
        kc::pack_bf16(A(g, 2 * t), A(g, 2 * t + 1)), kc::pack_bf16(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
        kc::pack_bf16(A(g, 2 * t + 8), A(g, 2 * t + 9)), kc::pack_bf16(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
    const uint32_t b[2] = {kc::pack_bf16(B(2 * t, g), B(2 * t + 1, g)),
                           kc::pack_bf16(B(2 * t + 8, g), B(2 * t + 9, g))};
    float c[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    kc::mma_bf16(c, a, b);
    for (int i = 0; i < 4; ++i) d[static_cast<size_t>(lane * 4 + i)] = c[i];
  });
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int r = lane / 4 + (i >= 2 ? 8 : 0), n = 2 * (lane % 4) + (i & 1);
      double want = 0.5;
      for (int k = 0; k < 16; ++k) want += static_cast<double>(A(r, k)) * B(k, n);  // exact in bf16: small multiples
      EXPECT_EQ(d[static_cast<size_t>(lane * 4 + i)], static_cast<float>(want)) << "lane " << lane << " element " << i;
    }
}

// A warp-wide operation that part of a warp never reaches is reported, not a hang.
TEST(WarpEmulation, AShuffleThatPartOfTheWarpSkipsIsADeadlock) {
  QKV_SKIP_UNDER_ASAN();
  EXPECT_THROW(emu::launch({1, 1, 1}, 64, 0,
                           [] {
                             if (threadIdx.x % 32 < 16) {
                               __syncthreads();
                             } else {
                               (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
                               __syncthreads();
                             }
                           }),
               emu::Deadlock);
}

TEST(FlashAttentionEmulated, RaggedShapesEveryHeadSizeInstance) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 100;
  check_case<32>({2, 17, 17, 2, 16, false, false, 0.f}, seed += 10);
  check_case<32>({1, 67, 67, 1, 32, true, false, 0.f}, seed += 10, true);
  check_case<64>({1, 3, 17, 2, 64, false, false, 0.f}, seed += 10, true);
  check_case<64>({1, 70, 70, 1, 64, true, false, 0.f}, seed += 10);
  check_case<96>({1, 20, 33, 1, 67, false, false, 0.f}, seed += 10);        // odd head size: zero-padded columns
  check_case<128>({1, 17, 9, 1, 128, true, false, 0.f}, seed += 10, true);  // causal, fewer keys than queries
}

// Tensor cores truncate their fp32 sums (Fasi et al. 2021) where the emulator otherwise rounds to nearest: a bias
// that grows with the mma summed into one accumulator (three per 8 keys in the fp32 mode's 3xTF32). With every mma
// truncating, the fp32 mode still holds its 1e-5 at the char GPT's attention (T 256, head size 64, causal): the
// gradients of k and v, 256 queries deep, come nearest (about 7e-6 on these inputs).
TEST(FlashAttentionEmulated, Fp32HoldsItsToleranceWhenTheMmaTruncates) {
  QKV_SKIP_UNDER_ASAN();
  const emu::MmaRounding before = emu::set_mma_rounding(emu::MmaRounding::TowardZero);
  check_case<64>({1, 256, 256, 1, 64, true, false, 0.f}, 7, true);
  emu::set_mma_rounding(before);
}

TEST(FlashAttentionEmulated, KeyPaddingDropoutAndTheKvCacheShape) {
  QKV_SKIP_UNDER_ASAN();
  uint64_t seed = 200;
  check_case<32>({2, 19, 19, 2, 16, true, true, 0.f}, seed += 10);    // batch 0: every key padded
  check_case<64>({1, 33, 40, 1, 64, false, true, 0.3f}, seed += 10);  // dropout: the CPU's mask, element for element
  check_case<32>({2, 3, 67, 1, 32, true, false, 0.f, 64, 5}, seed += 10);       // 3 new queries after 64 cached keys
  check_case<64>({1, 1, 65, 2, 64, true, true, 0.f, 64, 3}, seed += 10, true);  // decode, one query
}

}  // namespace
}  // namespace qkv::flash_emulation_test
