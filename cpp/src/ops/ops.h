#pragma once
// The op contract: every piece of arithmetic a model does on tensor data, and every move of that data, is a
// call of one Backend's methods. Layers (nn/), models (models/), the optimizer (train/) and generation
// (infer/) include this header and nothing of kernels/: they never know which device runs them.
//
// Why a table of virtual methods (ggml's backend table) rather than a Device argument on free functions or a
// template: a model picks its backend at run time (created on a device, moved with to()), one indirect call per
// op is nothing next to the op, and the three executors stay three classes side by side:
//   reference (exec/reference/reference_backend.cpp): plain loops, no threads, the oracle every other backend is tested
//                                          against (tests/cpp/ops/backend_ops_test.cpp);
//   cpu       (exec/cpu/cpu_backend.cpp): the xsimd kernels of kernels/cpu and the thread pool; also wasm's;
//   cuda      (exec/cuda/cuda_backend.cpp): kernels/cuda, cuBLAS for products; only in builds with CUDA.
//
// Rules every backend keeps (the formulas and aliasing rules of each op are kernels/kernels.h's, repeated here
// only where the contract adds something):
//   - Every pointer and span is memory of this backend's device (allocate(), or an Arena block of it) unless
//     its comment says "host". A span's size is the op's extent; sizes are host ints.
//   - Arguments: outputs, what the forward saves for the backward, inputs, parameters, sizes, scratch.
//   - Parameter gradients (dw, db, dwte, ...) ACCUMULATE (+=); activation gradients are overwritten unless
//     the comment says otherwise.
//   - An op that needs scratch takes it last, sized by its *_scratch_size (floats; 0 for a backend that needs
//     none, which then accepts an empty span). The caller takes it from the model's Workspace, so no op allocates.
//   - Work is queued in order on the device; only download(), sum_squares(), clipped_adam_sums(), take() and
//     synchronize() wait for it.
//   - Bad sizes are refused with qkv::Error before any work starts. Token ids are validated by the models on
//     the host before they reach a backend (Ids below).
//
// Dimension legend: B batch, T sequence, C channels (d_model), H heads, hs = C/H, V vocabulary, N a row's width.
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ops/adam_plan.h"
#include "ops/types.h"
#include "qkv/tensor.h"

namespace qkv::ops {

// Token ids or targets as ops take them: the host copy the model validated, and the same ids in device memory
// (upload_ids). On the CPU both point at the same memory. The host side is what the reference executor reads,
// and what the models count accuracy against; the CUDA ops read the device side only.
struct Ids {
  std::span<const int32_t> host;
  const int32_t* device = nullptr;
};

// Thrown by a backend inside begin_step/end_step when the step must be run again (nothing of it ran): see
// Backend::begin_step. Not an error the user sees: the model retries the step.
struct StepRetry : std::exception {
  const char* what() const noexcept override { return "the captured step must be run again op by op"; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // "reference", "cpu (avx512, 2 threads)", "cuda (NVIDIA H100 80GB HBM3)": for logs and errors.
  virtual std::string name() const = 0;

  // ---- Memory and moving data ----

  // Device memory for `bytes`, aligned to at least 64 bytes, zero-filled. Throws qkv::Error ("out of memory:
  // ... needed N bytes") on failure. free(nullptr) does nothing.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* p) noexcept = 0;
  // host -> device and device -> host; download waits for the work queued before it.
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  // device -> device, `bytes` of any type; the regions must not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // device -> device: rows of `cols` floats, row r from src + r * ld_src to dst + r * ld_dst. The regions must
  // not overlap. (Residual copies, KV-cache appends and reorders, first-token pooling.)
  virtual void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) = 0;
  // x[i] = value for i < x.size()
  virtual void fill(Span x, float value) = 0;
  // Waits for all queued work; an error raised inside it is reported under `op`.
  virtual void synchronize(const char* op) = 0;

  // ---- Arithmetic ----

  // C (M,N) = alpha * op(A) op(B) + beta * C, row-major with leading dimensions; beta == 0 does not read C.
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) = 0;

  // out = a + b, elementwise over out.size(); out may alias a or b.
  virtual void add(Span out, CSpan a, CSpan b) = 0;

  // LayerNorm (eps 1e-5), its residual-fused form and its backward: kernels.h's layernorm_* exactly.
  virtual void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) = 0;
  virtual void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b,
                                          int rows, int C) = 0;
  virtual size_t layernorm_backward_scratch_size(int rows, int C) const = 0;
  virtual void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean,
                                  CSpan rstd, int rows, int C, Span scratch) = 0;

  // A Linear layer's epilogue (kernels.h's bias_act_*): forward h += b in place, a = act(h); backward
  // dh = da * act'(h), db += sum_rows dh. b and db may be empty (no bias); dh may be empty (only db).
  virtual void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N) = 0;
  virtual size_t bias_act_backward_scratch_size(int rows, int N) const = 0;
  virtual void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N, Span scratch) = 0;

  // A Linear layer's forward: h (rows, out) = x (rows, in) w^T (w: (out, in)) + b, then a = act(h) unless act is
  // Identity and a is h. b may be empty. Under ReLU, h is scratch: a backend may leave it unwritten (ReLU's
  // backward reads the sign of a, and a > 0 exactly where h > 0). The default is gemm then bias_act_forward (one
  // pass for bias and activation); a backend whose matrix product can add the bias and a ReLU itself (cuBLASLt's
  // epilogues) overrides it.
  virtual void linear_forward(Span a, Span h, CSpan x, CSpan w, CSpan b, Act act, int rows, int in, int out);

  // Inverted dropout with the counter-based mask of kernels.h (the same mask on every backend).
  virtual void dropout_forward(Span y, CSpan x, float p, uint64_t seed) = 0;
  virtual void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed) = 0;

  // Fused multi-head attention (kernels.h's AttentionShape and formulas); s.key_pad, when set, is device
  // memory (B, key_rows). lse (B,H,Tq) is saved for the backward. One scratch serves both directions, sized
  // for up to `tasks` (b, h) pairs at once (the CPU runs that many threads' tiles).
  virtual size_t attention_scratch_size(const AttentionShape& s, int tasks) const = 0;
  virtual void attention_forward(Span out, Span lse, const float* q, const float* k, const float* v,
                                 const AttentionShape& s, Span scratch) = 0;
  // dq (stride ldq), dk and dv (stride ldkv) are overwritten in the heads' columns.
  virtual void attention_backward(float* dq, float* dk, float* dv, CSpan dout, const float* q, const float* k,
                                  const float* v, CSpan out, CSpan lse, const AttentionShape& s, Span scratch) = 0;
  // att (B,H,Tq,Tk) = the softmax weights before dropout, materialised (inspection).
  virtual void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s) = 0;

  // x (B,T,C) = scale * wte[tokens] + pos[t]; backward: dwte rows += scale * dx, dpos rows += dx (dpos may be
  // empty). scratch: embedding_backward_scratch_size(V, B*T) floats (the CUDA backend sorts the rows by token there).
  virtual void embedding_forward(Span x, const Ids& tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C) = 0;
  virtual size_t embedding_backward_scratch_size(int V, int rows) const = 0;
  virtual void embedding_backward(Span dwte, Span dpos, CSpan dx, const Ids& tokens, float scale, int B, int T, int C,
                                  Span scratch) = 0;

  // Pooling of the encoder's output for the classifier head: x (B,T,C) -> out (B,C), the mean over the positions
  // whose key_pad flag (B,T, device memory) is 0 (a row of only padding gives 0). The backward writes dx (B,T,C)
  // whole: dout / count at the counted positions, 0 elsewhere.
  virtual void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C) = 0;
  virtual void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C) = 0;

  // Softmax cross-entropy with ignore_index and label smoothing (kernels.h's crossentropy_*).
  virtual void crossentropy_forward(Span losses, CSpan logits, const Ids& targets, int rows, int V, int ignore_index,
                                    float smoothing) = 0;
  virtual void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const Ids& targets, float scale,
                                             int rows, int V, int ignore_index, float smoothing) = 0;
  // best[r] = the first index of the largest logit of row r (accuracy; greedy decoding): logits (rows, V).
  virtual void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) = 0;

  // One Adam(W) step over the flat buffers (kernels.h's adam_step); ranges are host memory. scratch:
  // adam_scratch_size(ranges.size()) floats (the CUDA backend uploads the ranges there).
  virtual size_t adam_scratch_size(size_t ranges) const = 0;
  virtual void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h,
                         Span scratch) = 0;
  // sum(x^2) in double, summed in fixed blocks (independent of the thread count); waits for the result.
  virtual size_t sum_squares_scratch_size() const = 0;
  virtual double sum_squares(CSpan x, Span scratch) = 0;

  // The optimizer's update with global-norm clipping, decided from the gradients themselves and queued without a
  // wait: s = sum_squares(g_all) and s_gate = sum_squares(gate); when both are finite, adam_step over (p, m, v, g)
  // with h.grad_scale replaced by torch's clip_grad_norm_ factor, max_norm / (sqrt(s) + 1e-6) rounded to float
  // where max_norm > 0 and that is below 1, else 1; when either is not finite nothing is written. g_all is every
  // gradient (the norm's), g the part this replica updates (all of it but under ZeRO-1), gate values that must be
  // finite for the update to happen (a step's per-row losses; may be empty). The default decides on the host
  // between the ops and returns {s, s_gate}; a backend that decides on the device (CUDA) queues it all, so that a
  // whole training step can run without the host, and returns nothing: its clipped_adam_sums(scratch) then reads
  // {s, s_gate} (it waits), or read_later(clipped_adam_sums_span(scratch)) queues their copy. A backend whose
  // clipped_adam_step returns the sums has neither. The hyper-parameters are plan.hyper[0], or on a backend that
  // decides on the device, the plan's pick for a step queued behind others still undecided (ops/adam_plan.h; the
  // scratch keeps the AdamState: the same scratch from step to step, zeroed when made).
  virtual size_t clipped_adam_scratch_size(size_t ranges) const;
  virtual std::optional<std::array<double, 2>> clipped_adam_step(Span p, Span m, Span v, CSpan g, CSpan g_all,
                                                                 CSpan gate, std::span<const AdamRange> ranges,
                                                                 const AdamPlan& plan, float max_norm, Span scratch);
  virtual std::array<double, 2> clipped_adam_sums(Span scratch);
  virtual CSpan clipped_adam_sums_span(CSpan scratch) const;

  // Copies of device floats to the host queued behind the work queued so far, without waiting where the device
  // runs apart from the host (CUDA): the loss of a training step read while the next one runs. take(id, dst) waits
  // for them and writes the parts one after another into dst (their total size), once; every id is taken once.
  // The default copies at once (download). Not inside a step (begin_step .. end_step).
  virtual uint64_t read_later(std::span<const CSpan> parts);
  virtual void take(uint64_t id, std::span<float> dst);

  // ---- A training step as one unit ----

  // Whether this backend runs a training step queued whole to advantage (it decides the update on the device and
  // may launch the step as one unit): models then queue the step without reading anything back until its end
  // (models/model_core.h). Elsewhere a step reads its loss before the backward, and a non-finite one skips it.
  virtual bool queues_whole_steps() const { return false; }

  // A model brackets one training step's ops (forward, loss, backward, the clipped update) with begin_step and
  // end_step; a backend that can launch them as one unit (CUDA: a graph captured once per key, then replayed)
  // does, the others run every op as it comes (these defaults do nothing). `key` names the step's shape: the
  // backend may capture the ops of a key it has seen run once, and replay them for the same key later. Between
  // the two calls nothing may wait for the device (download, sum_squares, synchronize) and no host memory may be
  // read after the call that passed it (upload copies it at once). Bad arguments still throw qkv::Error at once.
  //
  // A backend that replays checks each op's arguments against the captured ones; where a step goes another way
  // (a pointer or a size changed under the same key), or a capture fails, begin_step's caller gets StepRetry
  // (from any op or from end_step) with nothing run on the device, and runs the step again: the backend then
  // runs it op by op. cancel_step ends a step left by another exception (it never throws); it returns true when
  // the backend's capture of the step had broken, so that the exception may be the capture's: the caller then
  // runs the step again too (a real error comes back from that run).
  virtual void begin_step(uint64_t key);
  virtual void end_step();
  virtual bool cancel_step() noexcept;

 private:
  // read_later's copies where the default makes them.
  std::mutex reads_mutex_;
  std::map<uint64_t, std::vector<float>> reads_;
  uint64_t next_read_ = 1;
};

// The backend of a device, made on first use and kept for the process. Device::CUDA throws qkv::Error with
// cuda_unavailable_reason() when this build or machine has none.
Backend& backend(Device device);
// Returns WebGPU memory to its connection even after that failed (the deleter of a Tensor: never throws).
void webgpu_free(void* p) noexcept;

// The oracle: plain loops, one thread.
Backend& reference_backend();
// Tests and debugging (ggml's use_ref): while on, backend(Device::CPU) is the reference executor, so a model
// created or moved to the CPU from then on runs every op as plain loops. Returns the previous setting.
bool set_cpu_reference(bool on);
// Tests: while set, backend(Device::CPU) is `b` (a test's executor wrapping the CPU's: models/deferred_step_test.cpp
// defers a training step as CUDA graphs do); nullptr restores the CPU backend. Returns the previous one.
Backend* set_cpu_backend_for_tests(Backend* b);

// The fixed sinusoidal position table (T,C) of "Attention Is All You Need" (kernels.h: sinusoidal_positions),
// computed on the host once per model and then kept on its device as a constant.
std::vector<float> sinusoidal_table(int T, int C);

// The token ids of a batch on a backend: validated host ids in, the Ids an op takes out. dst: device memory for
// ids.size() ints (a Workspace::take_ints span); on the CPU the host ids are used where they are.
Ids upload_ids(Backend& b, std::span<int32_t> dst, std::span<const int32_t> host);

}  // namespace qkv::ops
