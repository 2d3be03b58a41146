// qkv_cuda_bench: the CUDA ops one by one at the char GPT's GPU shapes (B 64, T 256, C 384, H 6, hs 64, V 65,
// d_ff 1536), plus LayerNorm backward and cross-entropy at the Seq2Seq's (rows 6400, C 512, V 10000), timed with CUDA
// events (median of --reps after warm-up), on random data. For each op: the time, and the floor it is judged against
// (bench/README.md's method): bytes it must move at the measured copy bandwidth, or FLOPs at the measured fp32/TF32
// matrix rate (both measured first, in the same run). Built only with CUDA.
//   usage: qkv_cuda_bench [--reps N]
// Prints a table and a RESULT line per op: RESULT bench=cuda-op op=<name> ms=<median> floor_ms=<x>, plus tflops=<rate>
// on the attention rows (old row-wise kernels and the flash ones in both precisions, against the H100's TF32 rate).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/arena.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/stream.h"
#include "qkv/device.h"
#include "runtime/random.h"

namespace kc = qkv::kernels::cuda;

namespace {

int reps = 50;

// Median milliseconds of fn over `reps` runs, each between two events, after 3 warm-up runs.
double time_ms(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t a, b;
  kc::check_cuda(cudaEventCreate(&a), "bench", "cudaEventCreate");
  kc::check_cuda(cudaEventCreate(&b), "bench", "cudaEventCreate");
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    kc::check_cuda(cudaEventRecord(a, kc::stream()), "bench", "cudaEventRecord");
    fn();
    kc::check_cuda(cudaEventRecord(b, kc::stream()), "bench", "cudaEventRecord");
    kc::check_cuda(cudaEventSynchronize(b), "bench", "cudaEventSynchronize");
    float t = 0;
    kc::check_cuda(cudaEventElapsedTime(&t, a, b), "bench", "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void fill(float* dst, size_t n, uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<float> h(n);
  for (float& x : h) x = static_cast<float>(rng.normal());
  kc::upload(dst, h, "bench");
}

void row(const char* op, double ms, double floor_ms, const char* bound) {
  std::printf("%-36s %9.3f %9.3f %6.1f%%  %s\n", op, ms, floor_ms, 100.0 * floor_ms / ms, bound);
  std::printf("RESULT bench=cuda-op op=%s ms=%.4f floor_ms=%.4f\n", op, ms, floor_ms);
}

// The H100 SXM's dense tensor-core rates (NVIDIA's H100 datasheet: 989 TF32 and 1979 bf16 TFLOP/s with sparsity,
// half of each dense), the floors attention is judged against.
constexpr double kTensorTf32 = 494e12;
constexpr double kTensorBf16 = 989e12;

// A FLOP-bound row: the time, the floor at `peak`, its share, and the rate reached.
void flops_row(const char* op, double ms, double flops, double peak = kTensorTf32) {
  const double floor_ms = flops / peak * 1e3, tflops = flops / (ms / 1e3) / 1e12;
  std::printf("%-36s %9.3f %9.3f %6.1f%%  FLOPs at %.0f %s TFLOP/s: %.1f TFLOP/s\n", op, ms, floor_ms,
              100.0 * floor_ms / ms, peak / 1e12, peak == kTensorBf16 ? "bf16" : "TF32", tflops);
  std::printf("RESULT bench=cuda-op op=%s ms=%.4f floor_ms=%.4f tflops=%.2f\n", op, ms, floor_ms, tflops);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
  if (qkv::cuda_device_count() == 0) {
    std::printf("qkv_cuda_bench: %s\n", qkv::cuda_unavailable_reason().c_str());
    return 1;
  }
  const int B = 64, T = 256, C = 384, H = 6, V = 65, F = 4 * C, rows = B * T;
  const size_t n = static_cast<size_t>(rows) * C, nf = static_cast<size_t>(rows) * F;
  const size_t big = size_t{1} << 28;  // 1 GiB of floats each way, for the bandwidth
  kc::DeviceArena arena;
  float *x, *y, *r, *mean, *rstd, *w, *b, *dx, *dw, *db, *dbf, *scratch, *h, *a, *wf, *qkv, *out, *lse, *dqkv, *logits,
      *loss;
  float *copy_src, *copy_dst, *attn_scratch;
  void* embed_scratch;
  size_t embed_bytes = 0;
  int32_t *targets, *targets_s2s;
  const qkv::kernels::AttentionShape s{B, T, T, C, H, 3 * C, 3 * C, nullptr, true, 0.f, 0};
  arena.plan([&](kc::DeviceArena& m) {
    x = m.take(n), y = m.take(n), r = m.take(n), mean = m.take(rows), rstd = m.take(rows), w = m.take(C);
    b = m.take(C), dx = m.take(n), dw = m.take(C), db = m.take(C), dbf = m.take(F);
    scratch =
        m.take(std::max(kc::layernorm_backward_scratch_size(rows, C), kc::bias_act_backward_scratch_size(rows, F)));
    h = m.take(nf), a = m.take(nf), wf = m.take(static_cast<size_t>(F) * C), qkv = m.take(3 * n), out = m.take(n);
    lse = m.take(static_cast<size_t>(B) * H * T), dqkv = m.take(3 * n), logits = m.take(static_cast<size_t>(rows) * V);
    loss = m.take(rows), targets = m.take_ints(rows), targets_s2s = m.take_ints(rows),
    attn_scratch = m.take(kc::attention_backward_scratch_size(s));
    embed_bytes =
        std::max(kc::embedding_backward_scratch_bytes(V, rows), kc::embedding_backward_scratch_bytes(10000, 6400));
    embed_scratch = m.take_bytes(embed_bytes);
    copy_src = m.take(big), copy_dst = m.take(big);
  });
  // Random data everywhere an op reads (never zeros: METHOD.md); the big copy buffer gets a 1M-float random block
  // repeated.
  uint64_t seed = 1;
  for (auto [p, count] : std::vector<std::pair<float*, size_t>>{{x, n},
                                                                {y, n},
                                                                {w, C},
                                                                {b, C},
                                                                {h, nf},
                                                                {wf, size_t(F) * C},
                                                                {qkv, 3 * n},
                                                                {out, n},
                                                                {logits, size_t(rows) * V}})
    fill(p, count, seed++);
  const size_t block = size_t{1} << 20;
  fill(copy_src, block, seed++);
  for (size_t at = block; at < big; at += block)
    kc::check_cuda(cudaMemcpy(copy_src + at, copy_src, block * sizeof(float), cudaMemcpyDeviceToDevice), "bench",
                   "fill");
  std::vector<int32_t> t(rows);
  for (int i = 0; i < rows; ++i) t[i] = i % V;
  kc::upload_ids(targets, t, V, std::nullopt, "bench", "targets");
  // The Seq2Seq's shapes (rows 6400 = 64 x 100 tokens, C 512, V 10000): targets spread over the vocabulary.
  const int rows_s2s = 6400, C_s2s = 512, V_s2s = 10000;
  std::vector<int32_t> t2(rows_s2s);
  for (int i = 0; i < rows_s2s; ++i) t2[i] = (i * 7919) % V_s2s;
  kc::upload_ids(targets_s2s, t2, V_s2s, std::nullopt, "bench", "targets");

  // The two ceilings, measured here: copy bandwidth (bytes read + written) and the matrix rates.
  const double copy_ms = time_ms([&] {
    kc::check_cuda(cudaMemcpy(copy_dst, copy_src, big * sizeof(float), cudaMemcpyDeviceToDevice), "bench", "copy");
  });
  const double bw = 2.0 * big * sizeof(float) / (copy_ms / 1e3);  // bytes/s
  const auto gemm_rate = [&](kc::MatmulPrecision precision) {
    kc::set_matmul_precision(precision);
    const int M = 8192;  // copy_src / copy_dst hold 2^28 floats: 8192^2 * 3 fits
    const double ms = time_ms(
        [&] { kc::gemm(false, false, M, M, M, 1.f, copy_src, M, copy_src + size_t(M) * M, M, 0.f, copy_dst, M); });
    return 2.0 * M * M * M / (ms / 1e3);
  };
  const double fp32 = gemm_rate(kc::MatmulPrecision::Fp32), tf32 = gemm_rate(kc::MatmulPrecision::Tf32),
               bf16 = gemm_rate(kc::MatmulPrecision::Bf16);
  kc::set_matmul_precision(kc::MatmulPrecision::Fp32);
  std::printf(
      "%s\ncopy %.0f GB/s (read + write), gemm 8192^3 fp32 %.1f TFLOP/s, tf32 %.1f, bf16 (fp32 operands) %.1f\n",
      qkv::device_summary().c_str(), bw / 1e9, fp32 / 1e12, tf32 / 1e12, bf16 / 1e12);
  std::printf("%-36s %9s %9s %7s  %s\n", "op (B64 T256 C384 H6)", "ms", "floor ms", "of floor", "floor from");
  const auto mem = [&](double floats) { return floats * 4 / bw * 1e3; };

  row("layernorm_forward", time_ms([&] { kc::layernorm_forward(y, mean, rstd, x, w, b, rows, C); }), mem(2.0 * n),
      "bytes");
  row("residual_layernorm_forward",
      time_ms([&] { kc::residual_layernorm_forward(r, y, mean, rstd, x, y, w, b, rows, C); }), mem(4.0 * n), "bytes");
  row("layernorm_backward",
      time_ms([&] { kc::layernorm_backward(dx, dw, db, scratch, dx, y, x, w, mean, rstd, rows, C); }), mem(4.0 * n),
      "bytes");
  // dw, db (C_s2s each) in dbf, w in wf, scratch shared: all large enough; mean and rstd are finite numbers.
  row("layernorm_backward s2s (6400x512)", time_ms([&] {
        kc::layernorm_backward(dx, dbf, dbf + C_s2s, scratch, dx, y, x, wf, mean, rstd, rows_s2s, C_s2s);
      }),
      mem(4.0 * rows_s2s * C_s2s), "bytes");
  row("bias_act_forward gelu", time_ms([&] { kc::bias_act_forward(a, h, wf, qkv::kernels::Act::GELU, rows, F); }),
      mem(3.0 * nf), "bytes");
  row("bias_act_backward gelu",
      time_ms([&] { kc::bias_act_backward(a, dbf, scratch, a, h, qkv::kernels::Act::GELU, rows, F); }), mem(3.0 * nf),
      "bytes");
  row("dropout_forward", time_ms([&] { kc::dropout_forward(a, a, nf, 0.1f, 7); }), mem(2.0 * nf), "bytes");
  const struct {
    kc::MatmulPrecision precision;
    const char* name;
    double rate;
  } gemms[] = {{kc::MatmulPrecision::Fp32, "gemm fc (16384x1536x384) fp32", fp32},
               {kc::MatmulPrecision::Tf32, "gemm fc (16384x1536x384) tf32", tf32},
               {kc::MatmulPrecision::Bf16, "gemm fc (16384x1536x384) bf16", bf16}};
  for (const auto& g : gemms) {
    kc::set_matmul_precision(g.precision);
    row(g.name, time_ms([&] { kc::gemm(false, true, rows, F, C, 1.f, x, C, wf, C, 0.f, h, F); }),
        2.0 * rows * F * C / g.rate * 1e3, "FLOPs at the 8192^3 rate");
  }
  kc::set_matmul_precision(kc::MatmulPrecision::Fp32);
  // Attention, causal: useful FLOPs only (QK^T and PV, 2 T^2 hs each per (b, h), halved by the mask; the backward
  // counts FlashAttention's 5 products, 2.5x the forward, though the flash kernels recompute S and dP in both of
  // their kernels and do 7), against the H100 SXM's dense TF32 tensor-core rate, kTensorTf32 (the target:
  // >= 50% of it), whatever the precision. 3xTF32 issues three mma per useful product, so the fp32 rows cannot pass
  // a third of that floor. Old (row-wise FP32 kernels) vs new (flash, fp32 = 3xTF32, tf32, and bf16 against the
  // bf16 rate).
  const double attn_flops = 4.0 * B * H * T * T * (C / H) / 2;
  const auto precision_of = [](int variant) {
    return variant == 1   ? kc::AttentionPrecision::Fp32
           : variant == 2 ? kc::AttentionPrecision::Tf32
                          : kc::AttentionPrecision::Bf16;
  };
  const auto fwd = [&](int variant) {
    if (variant == 0) return kc::attention_forward_rowwise(out, lse, qkv, qkv + C, qkv + 2 * C, s);
    kc::attention_forward_flash(out, lse, qkv, qkv + C, qkv + 2 * C, s, precision_of(variant));
  };
  const auto bwd = [&](int variant) {
    if (variant == 0)
      return kc::attention_backward_rowwise(dqkv, dqkv + C, dqkv + 2 * C, attn_scratch, out, qkv, qkv + C, qkv + 2 * C,
                                            out, lse, s);
    kc::attention_backward_flash(dqkv, dqkv + C, dqkv + 2 * C, attn_scratch, out, qkv, qkv + C, qkv + 2 * C, out, lse,
                                 s, precision_of(variant));
  };
  const char* names[] = {"rowwise_fp32", "flash_fp32_3xtf32", "flash_tf32", "flash_bf16"};
  for (int variant = 0; variant < 4; ++variant) {
    const double peak = variant == 3 ? kTensorBf16 : kTensorTf32;
    fwd(variant);  // lse and out of this variant for its backward
    flops_row((std::string("attention_forward_") + names[variant]).c_str(), time_ms([&] { fwd(variant); }), attn_flops,
              peak);
    flops_row((std::string("attention_backward_") + names[variant]).c_str(), time_ms([&] { bwd(variant); }),
              2.5 * attn_flops, peak);
  }
  row("crossentropy_forward_backward",
      time_ms([&] { kc::crossentropy_forward_backward(loss, logits, logits, targets, 1.f / rows, rows, V, -1, 0.f); }),
      mem(2.0 * rows * V), "bytes");
  // The floor is one read of the logits and one write of the gradient: the kernel reads each row a second time
  // for the gradient, but from L1/L2 (crossentropy.cu). Logits: the random copy buffer; the gradient apart.
  row("crossentropy_fwd_bwd s2s (6400x10000)", time_ms([&] {
        kc::crossentropy_forward_backward(loss, copy_dst, copy_src, targets_s2s, 1.f / rows_s2s, rows_s2s, V_s2s, -1,
                                          0.1f);
      }),
      mem(2.0 * rows_s2s * V_s2s), "bytes");
  // The embedding backward: sort the rows by token on the device, then gather each token's rows. Floor: one read
  // of dx and one read and write of dwte (the sort's own traffic is over ints, B*T of them, and left out).
  row("embedding_backward", time_ms([&] {
        kc::embedding_backward(copy_dst, nullptr, x, targets, V, 1.f, B, T, C, embed_scratch, embed_bytes);
      }),
      mem(static_cast<double>(n) + 2.0 * V * C), "bytes");
  row("embedding_backward s2s (6400x512 V10000)", time_ms([&] {
        kc::embedding_backward(copy_dst, nullptr, copy_src, targets_s2s, V_s2s, 1.f, 64, 100, C_s2s, embed_scratch,
                               embed_bytes);
      }),
      mem(static_cast<double>(rows_s2s) * C_s2s + 2.0 * V_s2s * C_s2s), "bytes");
  kc::synchronize("bench");
  return 0;
}
