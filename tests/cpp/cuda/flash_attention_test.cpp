// The tensor-core attention kernels (kernels/cuda/flash_attention.cu) against the reference executor
// (exec/reference/reference_backend.cpp: plain loops, dot products in double), forward (out, lse) and backward (dq, dk,
// dv), in both precisions, on ragged shapes: T in 1, 3, 17, 64, 67, 257 (below, at and past the 16-row warp tiles and
// the 32/64-row block tiles), head sizes 16, 32, 64, 96, 128 (each template instance, D = 32, 64, 96, 128) and odd
// ones (3, 17, 67: zero-padded columns, the scalar loads), causal or not, key_pad with a batch whose keys are all
// padding, dropout (the same counter-based mask: outputs differ if a single kept/dropped decision does), a KV
// cache's q_pos / k_rows (the decode shape Tq = 1) and leading dimensions past C. Outputs start as NaN, so an
// element the kernels fail to write fails.
// Tolerances:
//   Fp32 (3xTF32): |gpu - ref| <= 1e-5 * max(1, |ref|) element by element, the CPU parity tolerance. 3xTF32 drops
//     a_small * b_small and rounds the small parts: about 3 * 2^-22 (7e-7) of |a||b| per product at worst, so an
//     hs-long dot of unit-scale terms is off by ~sqrt(hs) * 2e-7 < 3e-6, as fp32 arithmetic itself is.
//   Bf16: as Tf32 with kAttentionBf16Tolerance (8e-2): bf16 keeps 3 fewer significant bits.
//   Tf32: |gpu - ref| <= kAttentionTf32Tolerance (1e-2) * max(1, max |ref|) over each output. One TF32 rounding of
//     each input is 2^-11 (5e-4) relative: a score or dP = dout . v of hs = 128 unit-scale terms is off by about
//     sqrt(128) * 5e-4 * 0.7 ~ 4e-3 of its terms' scale, which exp and the P V / dS K products carry into the
//     outputs at the same relative order or below (estimated ~1e-3 of each output's scale; the bound leaves x10).
// Every test skips, naming the reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_cases.h"
#include "cuda_test_util.h"
#include "emulation/test_support.h"
#include "ops/backends.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::flash_attention_test {
namespace {

namespace kc = kernels::cuda;
using kc::AttentionPrecision;
using test::DeviceBuffers;
using test::dkv_columns;
using test::download;
using test::dq_columns;
using test::flash_reference;
using test::FlashCase;
using test::FlashInputs;
using test::FlashOutputs;
using test::near;
using test::poison;
using test::randn;

constexpr double kFp32 = 1e-5;

// The flash kernels in one precision against the reference; with twice, the backward runs a second time and must
// give the same bits (one writer per output, no atomics).
void check_flash(const FlashCase& c, uint64_t seed, bool twice = false) {
  SCOPED_TRACE(::testing::Message() << "B " << c.B << " Tq " << c.Tq << " Tk " << c.Tk << " H " << c.H << " hs " << c.hs
                                    << " causal " << c.causal << " pad " << c.pad << " dropout " << c.dropout
                                    << " q_pos " << c.q_pos << " k_rows " << c.Tk + c.extra_rows);
  const FlashInputs in(c, seed);
  const FlashOutputs want = flash_reference(c, in);
  const size_t nout = want.out.size(), nl = want.lse.size();
  const kernels::AttentionShape s0 = in.shape(c, nullptr);
  DeviceBuffers d({in.q.size(), in.kv.size(), nout, nout, nl, in.q.size(), in.kv.size(),
                   std::max<size_t>(kc::attention_backward_scratch_size(s0), 1)},
                  {}, {in.pad.size()});
  float *q_ = d.f[0], *kv_ = d.f[1], *dout_ = d.f[2], *out_ = d.f[3], *lse_ = d.f[4], *dq_ = d.f[5], *dkv_ = d.f[6];
  float* scratch_ = d.f[7];
  kc::upload(q_, in.q, "test"), kc::upload(kv_, in.kv, "test"), kc::upload(dout_, in.dout, "test");
  test::upload_bytes(d.b[0], in.pad.data(), in.pad.size());
  const kernels::AttentionShape s = in.shape(c, d.b[0]);
  for (AttentionPrecision precision : {AttentionPrecision::Fp32, AttentionPrecision::Tf32, AttentionPrecision::Bf16}) {
    const bool fp32 = precision == AttentionPrecision::Fp32, tf32 = precision == AttentionPrecision::Tf32;
    SCOPED_TRACE(fp32 ? "fp32 (3xTF32)" : tf32 ? "tf32" : "bf16");
    const auto check = [&](const char* what, const std::vector<float>& got, const std::vector<float>& ref) {
      if (fp32) {
        // The margin under kFp32 on this GPU (the emulator's truncating mma gives about 7e-6 at the char GPT's
        // shape: flash_emulation_test.cpp), printed whether or not the check passes.
        double worst = 0;
        for (size_t i = 0; i < got.size() && i < ref.size(); ++i)
          if (std::isfinite(ref[i]))
            worst = std::max(worst, std::abs(double(got[i]) - ref[i]) / std::max(1.0, std::abs(double(ref[i]))));
        std::printf("  fp32 (3xTF32) %s: max error %.3g (tolerance %.0e)\n", what, worst, kFp32);
      }
      return fp32 ? near(what, got, ref, kFp32)
                  : near(what, got, ref, tf32 ? kc::kAttentionTf32Tolerance : kc::kAttentionBf16Tolerance, false);
    };
    poison(out_, nout), poison(lse_, nl), poison(dq_, in.q.size()), poison(dkv_, in.kv.size());
    kc::attention_forward_flash(out_, lse_, q_, kv_, kv_ + in.C, s, precision);
    EXPECT_TRUE(check("out", download(out_, nout), want.out));
    EXPECT_TRUE(check("lse", download(lse_, nl), want.lse));
    kc::attention_backward_flash(dq_, dkv_, dkv_ + in.C, scratch_, dout_, q_, kv_, kv_ + in.C, out_, lse_, s,
                                 precision);
    const auto dq = download(dq_, in.q.size()), dkv = download(dkv_, in.kv.size());
    EXPECT_TRUE(check("dq", dq_columns(c, in, dq), dq_columns(c, in, want.dq)));
    EXPECT_TRUE(check("dk and dv", dkv_columns(c, in, dkv), dkv_columns(c, in, want.dkv)));
    if (twice) {
      kc::attention_backward_flash(dq_, dkv_, dkv_ + in.C, scratch_, dout_, q_, kv_, kv_ + in.C, out_, lse_, s,
                                   precision);
      // Bytes, not ==: the columns outside q (and k, v) keep their poison, and NaN == NaN is false.
      EXPECT_TRUE(test::same_bits(download(dq_, in.q.size()), dq)) << "dq differs between two identical runs";
      EXPECT_TRUE(test::same_bits(download(dkv_, in.kv.size()), dkv)) << "dk, dv differ between two identical runs";
    }
  }
}

constexpr int kSizes[] = {1, 3, 17, 64, 67, 257};
constexpr int kHeadSizes[] = {16, 32, 64, 96, 128};

TEST(CudaFlashAttention, MatchesTheReferenceOnRaggedShapes) {
  QKV_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1000;
  for (int T : kSizes)
    for (int hs : kHeadSizes)
      for (bool causal : {false, true}) check_flash({2, T, T, 2, hs, causal, false, 0.f}, seed += 10);
}

TEST(CudaFlashAttention, OddHeadSizesAndUnequalLengths) {
  QKV_SKIP_WITHOUT_CUDA();
  const FlashCase cases[] = {
      {1, 1, 1, 1, 1, false, false, 0.f},      {2, 3, 17, 2, 3, false, false, 0.f},
      {1, 67, 67, 2, 67, true, false, 0.f},    {3, 257, 257, 2, 17, true, false, 0.f},
      {2, 64, 257, 1, 128, false, false, 0.f}, {2, 257, 64, 3, 32, false, false, 0.f},
      {2, 17, 3, 2, 64, true, false, 0.f},  // causal with fewer keys than queries
  };
  uint64_t seed = 2000;
  for (const auto& c : cases) check_flash(c, seed += 10);
}

TEST(CudaFlashAttention, KeyPaddingAndDropoutUseTheSameMask) {
  QKV_SKIP_WITHOUT_CUDA();
  const FlashCase cases[] = {
      {2, 67, 67, 2, 64, true, true, 0.f},    {2, 64, 257, 1, 128, false, true, 0.f},
      {2, 64, 64, 6, 64, true, false, 0.1f},  {2, 17, 67, 2, 32, false, true, 0.5f},
      {2, 257, 257, 2, 96, true, true, 0.1f}, {3, 3, 17, 2, 16, false, false, 0.5f},
  };
  uint64_t seed = 3000;
  for (const auto& c : cases) check_flash(c, seed += 10);
}

TEST(CudaFlashAttention, KvCacheQueriesAtAnOffset) {
  QKV_SKIP_WITHOUT_CUDA();
  const FlashCase cases[] = {
      {2, 3, 67, 2, 64, true, false, 0.f, 64, 5},    // 3 new queries after 64 cached keys, 5 spare rows
      {1, 1, 257, 4, 32, true, false, 0.f, 256, 0},  // the decode step: one query, every key before it
      {2, 1, 65, 6, 64, true, true, 0.f, 64, 191},   // decode in a 256-row cache, with padding
      {2, 17, 81, 2, 128, true, false, 0.f, 64, 3},
  };
  uint64_t seed = 4000;
  for (const auto& c : cases) check_flash(c, seed += 10);
}

// The char GPT's attention (context 256, 6 heads of 64, causal) at batch 2: the benchmark's shape; and the
// backward twice, bit for bit.
TEST(CudaFlashAttention, CharGptShapeAndDeterminism) {
  QKV_SKIP_WITHOUT_CUDA();
  check_flash({2, 256, 256, 6, 64, true, false, 0.f}, 5000, true);
  check_flash({2, 256, 256, 6, 64, true, false, 0.1f}, 5010, true);
}

// The backend's selection follows the matrix products' precision (set_matmul_precision, which
// qkv::set_cuda_precision sets): attention_forward is the flash kernel of the same precision, bit for bit.
TEST(CudaFlashAttention, TheSelectionFollowsTheProductsPrecision) {
  QKV_SKIP_WITHOUT_CUDA();
  if (const char* e = std::getenv("QKV_CUDA_ATTENTION"); e && std::string(e) == "rowwise")
    GTEST_SKIP() << "QKV_CUDA_ATTENTION=rowwise routes the selection to the row-wise kernels";
  const FlashCase c{2, 67, 67, 2, 64, true, false, 0.f};
  const FlashInputs in(c, 6000);
  const size_t nout = static_cast<size_t>(c.B) * c.Tq * in.C, nl = static_cast<size_t>(c.B) * c.H * c.Tq;
  DeviceBuffers d({in.q.size(), in.kv.size(), nout, nl, nout, nl});
  kc::upload(d.f[0], in.q, "test"), kc::upload(d.f[1], in.kv, "test");
  const kernels::AttentionShape s = in.shape(c, nullptr);
  using M = kc::MatmulPrecision;
  const std::pair<M, AttentionPrecision> pairs[] = {
      {M::Fp32, AttentionPrecision::Fp32}, {M::Tf32, AttentionPrecision::Tf32}, {M::Bf16, AttentionPrecision::Bf16}};
  for (const auto& [matmul, attention] : pairs) {
    const test::MatmulPrecisionScope scope(matmul);
    kc::attention_forward(d.f[2], d.f[3], d.f[0], d.f[1], d.f[1] + in.C, s);
    kc::attention_forward_flash(d.f[4], d.f[5], d.f[0], d.f[1], d.f[1] + in.C, s, attention);
    EXPECT_EQ(download(d.f[2], nout), download(d.f[4], nout)) << static_cast<int>(matmul);
    EXPECT_EQ(download(d.f[3], nl), download(d.f[5], nl)) << static_cast<int>(matmul);
  }
}

}  // namespace
}  // namespace qkv::flash_attention_test
