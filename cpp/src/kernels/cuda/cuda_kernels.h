#pragma once
// The CUDA op set: kernels.h's ops with the same contracts (formulas, masks, aliasing rules, what the
// forward saves, parameter gradients that ACCUMULATE), on device pointers. Every pointer argument below
// is device memory unless its comment says "host"; sizes are host ints. Pure C++: no CUDA header here,
// so that layers and tests include it with the C++ compiler.
//
// Each op checks its sizes and pointers on the host and throws qkv::Error before any launch; a CUDA or
// cuBLAS failure becomes a qkv::Error naming the op (check.h). Token ids and targets cannot be checked on
// the device without a round trip, so they reach it only through upload_ids, which validates them on the
// host first: the ops that read ids take them as already validated, as the CPU ops do.
//
// All work goes to qkv's stream (stream.h), in order; nothing here synchronises except download,
// sum_squares and synchronize. Buffers come from a DeviceArena (arena.h): no op allocates.
//
// Dimension legend: B batch, T sequence, C channels, H heads, hs = C/H, V vocabulary, N a row's width.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kernels/kernels.h"
#include "ops/adam_plan.h"
#include "ops/weight_format.h"

namespace qkv::kernels::cuda {

// ---- Moving data (copy.cpp) ----

// Host -> device and device -> host copies of n floats; download waits for the work queued before it.
void upload(float* dst, std::span<const float> src, const char* op);
void download(std::span<float> dst, const float* src, const char* op);
// Throws qkv::Error naming the op, `what`, the first bad position and its value unless every id lies in
// [0, limit) or equals ignore_index (when given). Host memory only: this is how bad ids are refused before
// anything reaches the GPU.
void check_ids(std::span<const int32_t> ids, int limit, std::optional<int> ignore_index, const char* op,
               const char* what);
// check_ids, then the copy: the only way ids reach the device ops.
void upload_ids(int32_t* dst, std::span<const int32_t> ids, int limit, std::optional<int> ignore_index, const char* op,
                const char* what);
// Waits for all queued work; reports an error from inside a kernel under `op`.
void synchronize(const char* op);

// ---- Matrix product (gemm.cpp), cuBLAS ----

// kernels::gemm's contract (row-major, leading dimensions, all four transpose cases, beta == 0 does not read C).
// The arithmetic of the products (qkv::set_cuda_precision sets it for the process):
//   Fp32 (default): fp32 throughout.
//   Tf32: cuBLAS may use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulate): each product then carries a
//     relative error of about 2^-11 per input rounding, so a K-long dot product lands within about 1e-3 relative
//     of fp32 (kGemmTf32Tolerance, which the tests use, measured against the sum of |a||b| so that cancellation
//     does not inflate it).
//   Bf16: cuBLAS rounds both operands to bf16 (8 significant bits: up to 2^-8 relative per rounding) and
//     accumulates in fp32: each product a b carries up to about 2^-7 (8e-3) of |a||b|, a dot product up to that of
//     sum |a||b| plus fp32's accumulation (kGemmBf16Tolerance: the same 2x margin as TF32's, 8x its value).
// set_gemm_tf32(on) is set_matmul_precision(on ? Tf32 : Fp32); gemm_tf32() asks whether it is Tf32.
enum class MatmulPrecision { Fp32, Tf32, Bf16 };
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();
void set_gemm_tf32(bool on);
bool gemm_tf32();
// h (rows, out) = x (rows, in) w^T + b (w row-major (out, in), b (out)), every matrix dense, the bias added in
// cuBLASLt's epilogue in the products' precision (gemm_bias.cpp); with relu, h = max(x w^T + b, 0) (what a NaN
// gives is cuBLASLt's, undocumented; bias_act_forward's fmaxf and the CPU's SIMD max give 0). Returns false, having
// done nothing, where it cannot (no cuBLASLt, no algorithm for the shape, a bias not 16-byte aligned, cuBLASLt
// refusing the call, QKV_CUDA_LT=0): the caller then runs gemm and bias_act_forward.
bool gemm_bias(int rows, int out, int in, const float* x, const float* w, const float* b, float* h, bool relu = false);
// Whether gemm_bias has a plan for this call (made here on first use; nothing is queued): the CUDA backend
// chooses its path before it queues anything, so that a replayed training step walks the captured ops.
bool gemm_bias_planned(int rows, int out, int in, const float* x, const float* w, const float* b, const float* h,
                       bool relu = false);
constexpr double kGemmTf32Tolerance = 2e-3;
constexpr double kGemmBf16Tolerance = 1.6e-2;

// ---- LayerNorm and the fused residual add (layernorm.cu) ----

// kernels.h: layernorm_forward / residual_layernorm_forward. x, f, r, y: (rows, C); w, b: (C); mean, rstd: (rows).
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int rows,
                       int C);
void residual_layernorm_forward(float* r, float* y, float* mean, float* rstd, const float* x, const float* f,
                                const float* w, const float* b, int rows, int C);
// kernels.h: layernorm_backward (dr may alias dx, or be null). dw and db are summed in fixed blocks of 32
// rows and then block after block, the CPU's order: deterministic. scratch: layernorm_backward_scratch_size floats.
size_t layernorm_backward_scratch_size(int rows, int C);
void layernorm_backward(float* dx, float* dw, float* db, float* scratch, const float* dr, const float* dy,
                        const float* x, const float* w, const float* mean, const float* rstd, int rows, int C);

// ---- Bias + activation (bias_act.cu) ----

// kernels.h: bias_act_forward / bias_act_backward. h, a: (rows, N); b: (N) or null for no bias.
// dh may alias da or be null (only db); db null: no bias gradient. scratch: bias_act_backward_scratch_size.
void bias_act_forward(float* a, float* h, const float* b, Act act, int rows, int N);
size_t bias_act_backward_scratch_size(int rows, int N);
void bias_act_backward(float* dh, float* db, float* scratch, const float* da, const float* h, Act act, int rows, int N);

// ---- Dropout (dropout.cu) ----

// kernels.h: dropout_forward / dropout_backward over n elements, with the CPU's counter-based hash
// (dropout_hash.h): for the same (seed, p) the masks are identical, element for element. seed_dev: where set,
// the kernel reads the seed there (a captured step's scalar block: exec/cuda/step_graph.h).
void dropout_forward(float* y, const float* x, size_t n, float p, uint64_t seed, const uint64_t* seed_dev = nullptr);
void dropout_backward(float* dx, const float* dy, size_t n, float p, uint64_t seed, const uint64_t* seed_dev = nullptr);

// ---- Attention (flash_attention.cu: tensor cores; attention.cu: the row-wise FP32 reference, the weights) ----

// kernels.h: attention_forward / attention_backward / attention_weights; s.key_pad, when set, is DEVICE memory
// (B, key_rows). Fused: the (Tq,Tk) matrix is never stored; lse (B,H,Tq) as on the CPU. Limit: hs <=
// kAttentionMaxHeadSize. attention_forward / attention_backward are the selection the backend calls: the
// tensor-core kernels (FlashAttention-2's tiles, mma.sync) in the precision of the matrix products (Fp32, Tf32 or
// Bf16: qkv::set_cuda_precision), or the row-wise kernels when the environment has
// QKV_CUDA_ATTENTION=rowwise (A/B comparisons of whole steps).
constexpr int kAttentionMaxHeadSize = 128;
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttentionShape& s);
// scratch: attention_backward_scratch_size floats (D = rowsum(dout * out) per (b, h, t)), for every variant.
size_t attention_backward_scratch_size(const AttentionShape& s);
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse, const AttentionShape& s);
// att (B,H,Tq,Tk) = P: the scores, then the masked softmax of each row, materialised (only when asked for).
void attention_weights(float* att, const float* q, const float* k, const AttentionShape& s);

// The tensor-core kernels with their precision named (the tests and the benchmark force each):
//   Fp32: 3xTF32 (each operand split into two TF32 parts, three mma per product): fp32 accuracy, the CPU's
//         tolerance (1e-5).
//   Tf32: one TF32 mma per product (10-bit mantissa inputs, fp32 accumulation). Scores q.k carry about
//         sqrt(hs) * 2^-11 of |q||k| and dP = dout.v likewise, which reach out, dq, dk, dv through exp and two
//         more TF32 products: within kAttentionTf32Tolerance of the largest |value| of each output (at least 1).
//   Bf16: one bf16 mma (m16n8k16) per product: 8 significant bits per input, 3 fewer than TF32, so 8x its bound
//         (kAttentionBf16Tolerance), the same estimate scaled.
enum class AttentionPrecision { Fp32, Tf32, Bf16 };
constexpr double kAttentionTf32Tolerance = 1e-2;
constexpr double kAttentionBf16Tolerance = 8e-2;
void attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionShape& s, AttentionPrecision precision);
void attention_backward_flash(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              const AttentionShape& s, AttentionPrecision precision);
// The row-wise FP32 kernels (a warp per query row, CUDA cores): the GPU reference of the tensor-core ones.
void attention_forward_rowwise(float* out, float* lse, const float* q, const float* k, const float* v,
                               const AttentionShape& s);
void attention_backward_rowwise(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
                                const float* k, const float* v, const float* out, const float* lse,
                                const AttentionShape& s);

// ---- Embedding (embedding.cuh, embedding.cu) ----

// kernels.h: embedding_forward. tokens: (B,T) device ids from upload_ids.
void embedding_forward(float* x, const int32_t* tokens, const float* wte, const float* pos, float scale, int B, int T,
                       int C);
// dwte (V,C) += scale * dx at each token's rows; dpos (T_max,C), when not null, += dx summed over the batch.
// Deterministic, with no atomics and no host work: the rows are sorted by token on the device (stably, so each
// token's rows stay in increasing order) and one thread per (token, column) adds them in that order, the CPU's,
// with unfused multiply and add: dwte equals the CPU's bit for bit. tokens: (B,T) device ids in [0, V), from
// upload_ids. scratch: embedding_backward_scratch_bytes(V, B*T) bytes of device memory, any alignment.
size_t embedding_backward_scratch_bytes(int V, int rows);
void embedding_backward(float* dwte, float* dpos, const float* dx, const int32_t* tokens, int V, float scale, int B,
                        int T, int C, void* scratch, size_t scratch_bytes);

// ---- Quantized weights (gemm_quant.cuh, gemm_quant.cu) ----

// ops/op_list.def's quantized ops on device memory; W, wte: packed rows (ops/weight_format.h), 4-byte aligned, at
// row 0 of the rows used; scales (rows, scales_per_row), null allowed for F16 and BF16. Every element is
// dequantize_element's float (the decoding product factors each word's scale out of its dot product: the same math
// up to rounding).
// gemm_quant: C (M,N) = A (M,K) W^T, C overwritten. M <= 8 (decoding): a warp per row of W, 16-byte loads of the
// packed row, unpacked in registers, a shuffle reduction; above: 64 x 64 tiles with W dequantized into shared
// memory, fp32 FMA on the CUDA cores (gemm's fp32 arithmetic on the dequantized W; the tolerance of gemm's check).
void gemm_quant(int M, int N, int K, const float* A, int lda, ops::WeightFormat format, const uint8_t* W,
                const float* scales, float* C, int ldc);
// out (rows, K), row r at out + r * ld_out: W's rows dequantized (exactly dequantize_element's floats).
void dequantize_rows(float* out, int ld_out, ops::WeightFormat format, const uint8_t* W, const float* scales, int rows,
                     int K);
// embedding_forward with a packed table (V rows of C): x (B,T,C) = scale * deq(wte[tokens]) + pos[t] (pos null: no
// positions), with the CPU's unfused operations: equal to kernels::embedding_forward_quant bit for bit. tokens: (B,T)
// device ids from upload_ids.
void embedding_forward_quant(float* x, const int32_t* tokens, ops::WeightFormat format, const uint8_t* wte,
                             const float* wte_scales, const float* pos, float scale, int B, int T, int C);

// ---- Softmax cross-entropy (crossentropy.cu) ----

// kernels.h: crossentropy_forward / crossentropy_forward_backward. targets: (rows) device ids from upload_ids.
// scale_dev: where set, the kernels read the scale there (a captured step's scalar block: exec/cuda/step_graph.h).
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int rows, int V, int ignore_index,
                          float smoothing);
void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                   float scale, int rows, int V, int ignore_index, float smoothing,
                                   const float* scale_dev = nullptr);

// ---- Adam(W) and the gradient norm (adamw.cu) ----

// kernels.h: adam_step over elements [0, n) where n = the last range's end; ranges: n_ranges AdamRange
// (device memory, uploaded once per model: upload_ranges), sorted and disjoint. One fused pass, one launch.
void upload_ranges(AdamRange* dst, std::span<const AdamRange> ranges, const char* op);
void adam_step(float* p, float* m, float* v, const float* g, const AdamRange* ranges, int n_ranges, size_t n,
               const AdamHyper& h);
// sum(x^2) in double over a fixed grid (the same partial sums whatever the GPU), added on the host in order.
// scratch: sum_squares_scratch_size() doubles. Synchronises (the result is a host value).
size_t sum_squares_scratch_size();
double sum_squares(const float* x, size_t n, double* scratch);
// An Adam step's scalars as the kernels take them (from AdamHyper: the bias corrections in double, rounded to
// float, as kernels/cpu/adamw.cpp forms them).
struct AdamScalars {
  float grad_scale, beta1, beta2, step, sqrt_bc2, eps, lr;
  bool decoupled;
};
inline AdamScalars adam_scalars(const AdamHyper& h) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), h.t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), h.t);
  return AdamScalars{
      h.grad_scale, h.beta1, h.beta2,    static_cast<float>(h.lr / bc1), static_cast<float>(std::sqrt(bc2)),
      h.eps,        h.lr,    h.decoupled};
}
// A clipped step's plan (ops/adam_plan.h) as the decision kernel takes it: the scalars of each case.
struct AdamChoice {
  AdamScalars scalars[ops::kMaxStepsAhead + 1];
  int ahead, base, epoch, halt;
};
inline AdamChoice adam_choice(const ops::AdamPlan& plan) {
  AdamChoice c{};
  for (int j = 0; j <= plan.ahead; ++j) c.scalars[j] = adam_scalars(plan.hyper[j]);
  c.ahead = plan.ahead;
  c.base = plan.base;
  c.epoch = plan.epoch;
  c.halt = plan.halt;
  return c;
}
// ops.h's clipped_adam_step, decided on the device and queued without a wait: s = sum_squares(g_all) and the
// gate's sum of squares (the same partial sums, added in the same order), then the clipping factor and the
// update, which is skipped when either is not finite (or the plan's state says so: ops/adam_plan.h). The hyper's
// grad_scale is ignored; choice_dev, where set, holds adam_choice(plan) in device memory (a captured step's scalar
// block: exec/cuda/step_graph.h) and is read in its place. clipped_adam_sums(scratch) returns {s, the gate's} of the
// last step on that scratch (it waits); they are the two doubles at clipped_adam_sums_offset() doubles into it.
// scratch: clipped_adam_scratch_size() doubles, the same from step to step (it keeps the plan's AdamState), zeroed
// when made.
size_t clipped_adam_scratch_size();
size_t clipped_adam_sums_offset();
void clipped_adam_step(float* p, float* m, float* v, const float* g, const float* g_all, size_t n_all,
                       const float* gate, size_t n_gate, const AdamRange* ranges, int n_ranges, size_t n,
                       const ops::AdamPlan& plan, float max_norm, double* scratch,
                       const AdamChoice* choice_dev = nullptr);
std::array<double, 2> clipped_adam_sums(const double* scratch);

// ---- The small ops of a model's edges (elementwise.cu) ----

// kernels.h: add (out may alias a or b), argmax_rows (best: device ints), mean_pool_forward / backward
// (key_pad: device bytes (B,T)); fill sets n floats to value.
void add(float* out, const float* a, const float* b, size_t n);
void fill(float* x, float value, size_t n);
void argmax_rows(int32_t* best, const float* logits, int rows, int V);
void mean_pool_forward(float* out, const float* x, const uint8_t* key_pad, int B, int T, int C);
void mean_pool_backward(float* dx, const float* dout, const uint8_t* key_pad, int B, int T, int C);

}  // namespace qkv::kernels::cuda
