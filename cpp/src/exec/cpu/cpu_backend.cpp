// The CPU executor: the op contract on the xsimd kernels of kernels/cpu (their instruction set picked at run
// time) and the thread pool. The same file serves WebAssembly, whose kernels are the SSE4.1 build on SIMD128.
// Device memory is host memory here, so uploads and downloads are copies and synchronize() has nothing to wait for.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"
#include "ops/backends.h"
#include "ops/weight_quantize.h"
#include "qkv/cpu.h"
#include "qkv/error.h"
#include "qkv/thread_pool.h"

namespace qkv::ops {
namespace {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  std::string name() const override {
    return "cpu (" + active_isa() + ", " + std::to_string(num_threads()) + " threads)";
  }

  void* allocate(size_t bytes) override { return host_allocate(bytes); }
  void free(void* p) noexcept override { host_free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) override {
    kernels::copy_rows(dst, ld_dst, src, ld_src, rows, cols);
  }
  void fill(Span x, float value) override { std::fill(x.begin(), x.end(), value); }
  void synchronize(const char*) override {}

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    kernels::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void add(Span out, CSpan a, CSpan b) override { kernels::add(out, a, b); }
  void gemm_quant(int M, int N, int K, const float* A, int lda, int format, const uint8_t* W, const float* scales,
                  float* C, int ldc, bool int8_act) override {
    check_gemm_quant("gemm_quant (cpu)", M, N, K, A, lda, format, W, scales, C, ldc);
    kernels::gemm_quant(M, N, K, A, lda, static_cast<WeightFormat>(format), W, scales, C, ldc, int8_act);
  }
  void linear_quant_forward(Span a, Span h, const float* x, int format, const uint8_t* W, const float* scales, CSpan b,
                            Act act, int rows, int in, int out, bool int8_act) override {
    check_gemm_quant("linear_quant_forward (cpu)", rows, out, in, x, in, format, W, scales, h.data(), out);
    check(a.size() >= static_cast<size_t>(rows) * out && h.size() >= static_cast<size_t>(rows) * out &&
              (b.empty() || b.size() >= static_cast<size_t>(out)),
          "linear_quant_forward (cpu): a of ", a.size(), ", h of ", h.size(), " and b of ", b.size(), " floats for ",
          rows, " x ", out);
    const bool none = b.empty() && act == Act::Identity && a.data() == h.data();
    const kernels::QuantEpilogue e{a.data(), b.empty() ? nullptr : b.data(), act};
    kernels::gemm_quant(rows, out, in, x, in, static_cast<WeightFormat>(format), W, scales, h.data(), out, int8_act,
                        none ? nullptr : &e);
  }
  void dequantize_rows(float* out, int ld_out, int format, const uint8_t* W, const float* scales, int rows,
                       int K) override {
    check_dequantize_rows("dequantize_rows (cpu)", out, ld_out, format, W, scales, rows, K);
    kernels::dequantize_rows(out, ld_out, static_cast<WeightFormat>(format), W, scales, rows, K);
  }

  void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) override {
    kernels::layernorm_forward(y, mean, rstd, x, w, b, rows, C);
  }
  void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b, int rows,
                                  int C) override {
    kernels::residual_layernorm_forward(r, y, mean, rstd, x, f, w, b, rows, C);
  }
  size_t layernorm_backward_scratch_size(int, int) const override { return 0; }
  void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                          int rows, int C, Span) override {
    kernels::layernorm_backward(dx, dw, db, dr, dy, x, w, mean, rstd, rows, C);
  }

  void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N) override {
    kernels::bias_act_forward(a, h, b, act, rows, N);
  }
  size_t bias_act_backward_scratch_size(int, int) const override { return 0; }
  void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N, Span) override {
    kernels::bias_act_backward(dh, db, da, h, act, rows, N);
  }

  void dropout_forward(Span y, CSpan x, float p, uint64_t seed) override { kernels::dropout_forward(y, x, p, seed); }
  void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed) override {
    kernels::dropout_backward(dx, dy, p, seed);
  }

  size_t attention_scratch_size(const AttentionShape& s, int tasks) const override {
    return kernels::attention_scratch_size(s.Tq, s.Tk, s.C / s.H, std::max(1, std::min(tasks, max_threads())));
  }
  void attention_forward(Span out, Span lse, const float* q, const float* k, const float* v, const AttentionShape& s,
                         Span scratch) override {
    kernels::attention_forward(out, lse, scratch, q, k, v, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, CSpan dout, const float* q, const float* k, const float* v,
                          CSpan out, CSpan lse, const AttentionShape& s, Span scratch) override {
    kernels::attention_backward(dq, dk, dv, scratch, dout, q, k, v, out, lse, s);
  }
  void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s) override {
    kernels::attention_weights(att, q, k, s);
  }

  void embedding_forward(Span x, const Ids& tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C) override {
    kernels::embedding_forward(x, tokens.device, wte, pos, scale, B, T, C);
  }
  void embedding_forward_quant(Span x, const Ids& tokens, int format, const uint8_t* wte, const float* wte_scales,
                               CSpan pos, float scale, int B, int T, int C) override {
    check_embedding_forward_quant("embedding_forward_quant (cpu)", x.size(), tokens.device, format, wte, wte_scales,
                                  pos.size(), B, T, C);
    kernels::embedding_forward_quant(x, tokens.device, static_cast<WeightFormat>(format), wte, wte_scales, pos, scale,
                                     B, T, C);
  }
  size_t embedding_backward_scratch_size(int, int) const override { return 0; }
  void embedding_backward(Span dwte, Span dpos, CSpan dx, const Ids& tokens, float scale, int B, int T, int C,
                          Span) override {
    kernels::embedding_backward(dwte, dpos, dx, tokens.device, scale, B, T, C);
  }

  void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C) override {
    kernels::mean_pool_forward(out, x, key_pad, B, T, C);
  }
  void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C) override {
    kernels::mean_pool_backward(dx, dout, key_pad, B, T, C);
  }

  void crossentropy_forward(Span losses, CSpan logits, const Ids& targets, int rows, int V, int ignore_index,
                            float smoothing) override {
    kernels::crossentropy_forward(losses, logits, targets.device, rows, V, ignore_index, smoothing);
  }
  void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const Ids& targets, float scale, int rows,
                                     int V, int ignore_index, float smoothing) override {
    kernels::crossentropy_forward_backward(losses, dlogits, logits, targets.device, scale, rows, V, ignore_index,
                                           smoothing);
  }
  void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) override {
    kernels::argmax_rows(best, logits, rows, V);
  }

  size_t adam_scratch_size(size_t) const override { return 0; }
  void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h,
                 Span) override {
    kernels::adam_step(p, m, v, g, ranges, h);
  }
  size_t sum_squares_scratch_size() const override { return 0; }
  double sum_squares(CSpan x, Span) override { return kernels::sum_squares(x); }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace qkv::ops
