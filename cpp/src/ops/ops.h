#pragma once
// The op contract: every piece of arithmetic a model does on tensor data, and every move of that data, is a
// call of one Backend's methods. Layers (nn/), models (models/), the optimizer (train/) and generation
// (infer/) include this header and nothing of kernels/: they never know which device runs them.
//
// Why a table of virtual methods (ggml's backend table) rather than a Device argument on free functions or a
// template: a model picks its backend at run time (created on a device, moved with to()), one indirect call per
// op is nothing next to the op, and the four executors stay four classes side by side:
//   reference (exec/reference/reference_backend.cpp): plain loops, no threads, the oracle every other backend is tested
//                                          against (tests/cpp/ops/backend_ops_test.cpp);
//   cpu       (exec/cpu/cpu_backend.cpp): the xsimd kernels of kernels/cpu and the thread pool; also wasm's;
//   cuda      (exec/cuda/cuda_backend.cpp): kernels/cuda, cuBLAS for products; only in builds with CUDA;
//   webgpu    (exec/webgpu/webgpu_backend.cpp): each op a command in a ring that the npm package's GPU worker
//                                          runs as WGSL kernels.
// The ops are declared once, in ops/op_list.def (name, typed arguments, scratch rule), and class Backend's
// methods, the WebGPU ring words and the TypeScript/WGSL argument accessors, the step recorder's signatures
// and backend_check's list come from that declaration.
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
#include "ops/op_decl.h"
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
  // Waits for all queued work; an error raised inside it is reported under `op`.
  virtual void synchronize(const char* op) = 0;

  // ---- Arithmetic: every op of ops/op_list.def (its comments say what each computes) ----
  // Each becomes a pure virtual method (`virtual void gemm(bool trans_a, ..., int ldc) = 0;`), each scratch
  // rule a pure virtual `*_scratch_size`, so an executor that lacks one fails to build.
#define QKV_OP(name, Code, opcode, group, scratch) virtual void name(QKV_PARAMS(QKV_ARGS_##name)) = 0;
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch) virtual type name(QKV_PARAMS(QKV_ARGS_##name)) = 0;
#define QKV_SCRATCH(rule) virtual size_t rule##_scratch_size(QKV_PARAMS(QKV_SCRATCH_ARGS_##rule)) const = 0;
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST

  // A Linear layer's forward: h (rows, out) = x (rows, in) w^T (w: (out, in)) + b, then a = act(h) unless act is
  // Identity and a is h. b may be empty. Under ReLU, h is scratch: a backend may leave it unwritten (ReLU's
  // backward reads the sign of a, and a > 0 exactly where h > 0). The default is gemm then bias_act_forward (one
  // pass for bias and activation); a backend whose matrix product can add the bias and a ReLU itself (cuBLASLt's
  // epilogues) overrides it.
  virtual void linear_forward(Span a, Span h, CSpan x, CSpan w, CSpan b, Act act, int rows, int in, int out);
  // The same with a packed weight (ops/weight_format.h: W's out rows in `format`, its scales; int8_act as gemm_quant
  // takes it): h = x W^T by gemm_quant, then bias and activation. The default is gemm_quant then bias_act_forward;
  // the CPU executor applies the bias and activation to each piece of h as the pool's threads make it (a decoding
  // step's single row: GELU over 3072 columns no longer runs on one thread after the product).
  virtual void linear_quant_forward(Span a, Span h, const float* x, int format, const uint8_t* W, const float* scales,
                                    CSpan b, Act act, int rows, int in, int out, bool int8_act);

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
