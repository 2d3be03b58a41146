// The CUDA executor: the op contract (ops/ops.h) on the kernels of this folder, cuBLAS for the products.
// Device memory comes from cudaMalloc (a model's buffers and its workspace block, a few allocations per model);
// every op queues its work on qkv's stream (stream.h), in order, and only download(), sum_squares() and
// synchronize() wait for it. Sizes are checked on the host before any launch (the kernels' own checks), and
// a CUDA failure becomes a qkv::Error naming the op (check.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "exec/cuda/step_graph.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/host_copies.h"
#include "kernels/cuda/stream.h"
#include "ops/backends.h"
#include "ops/step_recorder.h"
#include "ops/weight_quantize.h"
#include "qkv/error.h"

namespace qkv::ops {
namespace {

namespace kc = kernels::cuda;

// Floats that hold n objects of type T, keeping the arena's alignment (every take is 64-byte aligned).
template <class T>
size_t floats_for(size_t n) {
  return (n * sizeof(T) + sizeof(float) - 1) / sizeof(float);
}

// Inside a captured or replayed step: the op's signature to the step graph, true when it must run nothing (a
// replay). Outside one: false, nothing hashed.
template <class... A>
bool replayed(const char* op, const A&... args) {
  kc::StepGraph& graph = kc::step_graph();
  if (!graph.active()) return false;
  // The products' and attention's arithmetic is baked into what was captured, too.
  return graph.skip(StepSignature::of(op, kc::matmul_precision(), args...));
}
// The same for an op of ops/op_list.def, hashed as its declaration says (ops/step_recorder.h: signature::).
template <class... P, class... A>
bool replayed(StepSignature (*signature_of)(P...), A&&... args) {
  kc::StepGraph& graph = kc::step_graph();
  if (!graph.active()) return false;
  StepSignature s = signature_of(std::forward<A>(args)...);
  s.add(kc::matmul_precision());
  return graph.skip(s.h);
}

// What waits for the device has no place inside a step launched as one graph (ops.h: begin_step).
void refuse_inside_step(const char* op) {
  check(!kc::step_graph().active(), op, " (cuda): waits for the device, which a training step launched as one ",
        "graph cannot do (a model calls it between begin_step and end_step)");
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    int device = 0;
    kc::check_cuda(cudaGetDevice(&device), "cuda backend", "cudaGetDevice");
    cudaDeviceProp prop{};
    kc::check_cuda(cudaGetDeviceProperties(&prop, device), "cuda backend", "cudaGetDeviceProperties");
    name_ = std::string("cuda (") + prop.name + ")";
  }

  Device device() const override { return Device::CUDA; }
  std::string name() const override { return name_; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // A capture cannot hold a cudaMalloc (it would report "out of memory"): what a step needs is made before it.
    check(!kc::step_graph().active(), "allocate (cuda): ", bytes, " bytes inside a training step launched as one ",
          "graph; what a step uses must be allocated before begin_step");
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: leave nothing behind for the next call to report
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw Error(detail::cat("out of memory on the GPU: needed ", bytes, " bytes, ", free, " of ", total, " free (",
                              cudaGetErrorName(e), ")"));
    }
    kc::check_cuda(cudaMemset(p, 0, bytes), "allocate", "cudaMemset");
    return p;
  }
  void free(void* p) noexcept override {
    if (p) cudaFree(p);
  }
  // Inside a step the bytes are staged in its block and copied by the graph (step_graph.h).
  void upload(void* dst, const void* src, size_t bytes) override {
    if (kc::step_graph().upload(dst, src, bytes)) return;
    // Behind the queued work, without waiting for it (a training step in flight): host_copies.h.
    if (kc::host_copies().upload(dst, src, bytes, "upload")) return;
    if (bytes) kc::check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload", "cudaMemcpy");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    refuse_inside_step("download");
    if (bytes) kc::check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download", "cudaMemcpy");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (replayed("copy", dst, src, bytes)) return;
    if (bytes)
      kc::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, kc::stream()), "copy",
                     "cudaMemcpyAsync");
  }
  void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) override {
    check(rows >= 0 && cols >= 0 && ld_dst >= cols && ld_src >= cols, "copy_rows (cuda): rows = ", rows,
          ", cols = ", cols, ", ld_dst = ", ld_dst, ", ld_src = ", ld_src, ": expected leading dimensions >= cols");
    if (rows == 0 || cols == 0 || replayed(signature::copy_rows, dst, ld_dst, src, ld_src, rows, cols)) return;
    kc::check_cuda(
        cudaMemcpy2DAsync(dst, static_cast<size_t>(ld_dst) * sizeof(float), src,
                          static_cast<size_t>(ld_src) * sizeof(float), static_cast<size_t>(cols) * sizeof(float),
                          static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, kc::stream()),
        "copy_rows", "cudaMemcpy2DAsync");
  }
  void fill(Span x, float value) override {
    if (replayed(signature::fill, x, value)) return;
    kc::fill(x.data(), value, x.size());
  }
  void synchronize(const char* op) override {
    refuse_inside_step(op);
    kc::synchronize(op);
  }

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    if (replayed(signature::gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
    kc::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void add(Span out, CSpan a, CSpan b) override {
    check(a.size() >= out.size() && b.size() >= out.size(), "add (cuda): inputs of ", a.size(), " and ", b.size(),
          " elements for an output of ", out.size());
    if (replayed(signature::add, out, a, b)) return;
    kc::add(out.data(), a.data(), b.data(), out.size());
  }

  void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) override {
    if (replayed(signature::layernorm_forward, y, mean, rstd, x, w, b, rows, C)) return;
    kc::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C);
  }
  void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b, int rows,
                                  int C) override {
    if (replayed(signature::residual_layernorm_forward, r, y, mean, rstd, x, f, w, b, rows, C)) return;
    kc::residual_layernorm_forward(r.data(), y.data(), mean.data(), rstd.data(), x.data(), f.data(), w.data(), b.data(),
                                   rows, C);
  }
  size_t layernorm_backward_scratch_size(int rows, int C) const override {
    return kc::layernorm_backward_scratch_size(rows, C);
  }
  void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                          int rows, int C, Span scratch) override {
    check(scratch.size() >= kc::layernorm_backward_scratch_size(rows, C), "layernorm_backward (cuda): scratch of ",
          scratch.size(), " floats: expected layernorm_backward_scratch_size(", rows, ", ", C, ")");
    if (replayed(signature::layernorm_backward, dx, dw, db, dr, dy, x, w, mean, rstd, rows, C, scratch)) return;
    kc::layernorm_backward(dx.data(), dw.data(), db.data(), scratch.data(), dr.empty() ? nullptr : dr.data(), dy.data(),
                           x.data(), w.data(), mean.data(), rstd.data(), rows, C);
  }

  // The bias in cuBLASLt's epilogue where it can (one pass less over h), then the activation alone; a ReLU goes in
  // the epilogue too, straight into a (h, scratch under ReLU by ops.h's contract, is left unwritten: two passes
  // less). The path is chosen before anything is queued (cuBLASLt's plan for the shape is kept), so that a replayed
  // step walks the ops its capture recorded: the default's gemm and bias_act_forward are ops of their own.
  void linear_forward(Span a, Span h, CSpan x, CSpan w, CSpan b, Act act, int rows, int in, int out) override {
    const bool relu = act == Act::ReLU;
    float* const dst = relu ? a.data() : h.data();
    if (b.empty() || !kc::gemm_bias_planned(rows, out, in, x.data(), w.data(), b.data(), dst, relu))
      return Backend::linear_forward(a, h, x, w, b, act, rows, in, out);
    if (replayed("linear_forward", a, h, x, w, b, act, rows, in, out)) return;
    if (!kc::gemm_bias(rows, out, in, x.data(), w.data(), b.data(), dst, relu)) {  // refused after all: nothing fused
      kc::gemm(false, true, rows, out, in, 1.f, x.data(), in, w.data(), in, 0.f, h.data(), out);
      kc::bias_act_forward(a.data(), h.data(), b.data(), act, rows, out);
      return;
    }
    if (!relu && (act != Act::Identity || a.data() != h.data()))
      kc::bias_act_forward(a.data(), h.data(), nullptr, act, rows, out);
  }
  void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N) override {
    if (replayed(signature::bias_act_forward, a, h, b, act, rows, N)) return;
    kc::bias_act_forward(a.data(), h.data(), b.empty() ? nullptr : b.data(), act, rows, N);
  }
  size_t bias_act_backward_scratch_size(int rows, int N) const override {
    return kc::bias_act_backward_scratch_size(rows, N);
  }
  void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N, Span scratch) override {
    check(db.empty() || scratch.size() >= kc::bias_act_backward_scratch_size(rows, N),
          "bias_act_backward (cuda): scratch of ", scratch.size(), " floats: expected bias_act_backward_scratch_size(",
          rows, ", ", N, ")");
    if (replayed(signature::bias_act_backward, dh, db, da, h, act, rows, N, scratch)) return;
    kc::bias_act_backward(dh.empty() ? nullptr : dh.data(), db.empty() ? nullptr : db.data(), scratch.data(), da.data(),
                          h.empty() ? nullptr : h.data(), act, rows, N);
  }

  // The seed is the step's scalar (a new one each pass): staged first, in every mode, in the same order.
  void dropout_forward(Span y, CSpan x, float p, uint64_t seed) override {
    const uint64_t* seed_dev = kc::step_graph().scalar(seed);
    if (replayed(signature::dropout_forward, y, x, p, seed)) return;
    kc::dropout_forward(y.data(), x.data(), y.size(), p, seed, seed_dev);
  }
  void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed) override {
    const uint64_t* seed_dev = kc::step_graph().scalar(seed);
    if (replayed(signature::dropout_backward, dx, dy, p, seed)) return;
    kc::dropout_backward(dx.data(), dy.data(), dx.size(), p, seed, seed_dev);
  }

  // The forward needs no scratch; the backward keeps D = rowsum(dout * out) per (b, h, t).
  size_t attention_scratch_size(const AttentionShape& s, int) const override {
    return kc::attention_backward_scratch_size(s);
  }
  void attention_forward(Span out, Span lse, const float* q, const float* k, const float* v, const AttentionShape& s,
                         Span scratch) override {
    AttentionShape shape = s;
    shape.seed_device = kc::step_graph().scalar(s.seed);
    if (replayed(signature::attention_forward, out, lse, q, k, v, s, scratch)) return;
    kc::attention_forward(out.data(), lse.data(), q, k, v, shape);
  }
  void attention_backward(float* dq, float* dk, float* dv, CSpan dout, const float* q, const float* k, const float* v,
                          CSpan out, CSpan lse, const AttentionShape& s, Span scratch) override {
    check(scratch.size() >= kc::attention_backward_scratch_size(s), "attention_backward (cuda): scratch of ",
          scratch.size(), " floats: expected attention_scratch_size");
    AttentionShape shape = s;
    shape.seed_device = kc::step_graph().scalar(s.seed);
    if (replayed(signature::attention_backward, dq, dk, dv, dout, q, k, v, out, lse, s, scratch)) return;
    kc::attention_backward(dq, dk, dv, scratch.data(), dout.data(), q, k, v, out.data(), lse.data(), shape);
  }
  void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s) override {
    if (replayed(signature::attention_weights, att, q, k, s)) return;
    kc::attention_weights(att.data(), q, k, s);
  }

  void embedding_forward(Span x, const Ids& tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C) override {
    if (replayed(signature::embedding_forward, x, tokens, wte, pos, scale, B, T, C)) return;
    kc::embedding_forward(x.data(), tokens.device, wte.data(), pos.empty() ? nullptr : pos.data(), scale, B, T, C);
  }
  void embedding_forward_quant(Span x, const Ids& tokens, int format, const uint8_t* wte, const float* wte_scales,
                               CSpan pos, float scale, int B, int T, int C) override {
    check_embedding_forward_quant("embedding_forward_quant (cuda)", x.size(), tokens.device, format, wte, wte_scales,
                                  pos.size(), B, T, C);
    if (replayed(signature::embedding_forward_quant, x, tokens, format, wte, wte_scales, pos, scale, B, T, C)) return;
    kc::embedding_forward_quant(x.data(), tokens.device, static_cast<WeightFormat>(format), wte, wte_scales,
                                pos.empty() ? nullptr : pos.data(), scale, B, T, C);
  }
  // int8_act: a permission not taken (the decoding kernels dequantize in registers, bound by the bytes they read).
  void gemm_quant(int M, int N, int K, const float* A, int lda, int format, const uint8_t* W, const float* scales,
                  float* C, int ldc, bool int8_act) override {
    check_gemm_quant("gemm_quant (cuda)", M, N, K, A, lda, format, W, scales, C, ldc);
    if (replayed(signature::gemm_quant, M, N, K, A, lda, format, W, scales, C, ldc, int8_act)) return;
    kc::gemm_quant(M, N, K, A, lda, static_cast<WeightFormat>(format), W, scales, C, ldc);
  }
  void dequantize_rows(float* out, int ld_out, int format, const uint8_t* W, const float* scales, int rows,
                       int K) override {
    check_dequantize_rows("dequantize_rows (cuda)", out, ld_out, format, W, scales, rows, K);
    if (replayed(signature::dequantize_rows, out, ld_out, format, W, scales, rows, K)) return;
    kc::dequantize_rows(out, ld_out, static_cast<WeightFormat>(format), W, scales, rows, K);
  }
  size_t embedding_backward_scratch_size(int V, int rows) const override {
    return (kc::embedding_backward_scratch_bytes(V, rows) + sizeof(float) - 1) / sizeof(float);
  }
  // The rows are sorted by token on the device and each token's rows added in order, without atomics
  // (kernels/cuda/embedding.cuh): the device ids alone, no host work, nothing that waits.
  void embedding_backward(Span dwte, Span dpos, CSpan dx, const Ids& tokens, float scale, int B, int T, int C,
                          Span scratch) override {
    check(C >= 1 && dwte.size() % static_cast<size_t>(C) == 0, "embedding_backward (cuda): dwte of ", dwte.size(),
          " floats is not a whole number of rows of C = ", C);
    const int V = static_cast<int>(dwte.size() / static_cast<size_t>(C));
    if (replayed(signature::embedding_backward, dwte, dpos, dx, tokens, scale, B, T, C, scratch)) return;
    kc::embedding_backward(dwte.data(), dpos.empty() ? nullptr : dpos.data(), dx.data(), tokens.device, V, scale, B, T,
                           C, scratch.data(), scratch.size_bytes());
  }

  void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C) override {
    if (replayed(signature::mean_pool_forward, out, x, key_pad, B, T, C)) return;
    kc::mean_pool_forward(out.data(), x.data(), key_pad, B, T, C);
  }
  void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C) override {
    if (replayed(signature::mean_pool_backward, dx, dout, key_pad, B, T, C)) return;
    kc::mean_pool_backward(dx.data(), dout.data(), key_pad, B, T, C);
  }

  void crossentropy_forward(Span losses, CSpan logits, const Ids& targets, int rows, int V, int ignore_index,
                            float smoothing) override {
    if (replayed(signature::crossentropy_forward, losses, logits, targets, rows, V, ignore_index, smoothing)) return;
    kc::crossentropy_forward(losses.data(), logits.data(), targets.device, rows, V, ignore_index, smoothing);
  }
  void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const Ids& targets, float scale, int rows,
                                     int V, int ignore_index, float smoothing) override {
    // scale (weight / the rows that count) changes with the targets: the step's scalar.
    const float* scale_dev = kc::step_graph().scalar(scale);
    if (replayed(signature::crossentropy_forward_backward, losses, dlogits, logits, targets, scale, rows, V,
                 ignore_index, smoothing))
      return;
    kc::crossentropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.device, scale, rows, V,
                                      ignore_index, smoothing, scale_dev);
  }
  void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) override {
    if (replayed(signature::argmax_rows, best, logits, rows, V)) return;
    kc::argmax_rows(best.data(), logits.data(), rows, V);
  }

  // The ranges are uploaded into scratch before the one fused launch.
  size_t adam_scratch_size(size_t ranges) const override { return floats_for<AdamRange>(ranges) + 2; }
  void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h,
                 Span scratch) override {
    check(scratch.size() >= adam_scratch_size(ranges.size()), "adam_step (cuda): scratch of ", scratch.size(),
          " floats: expected adam_scratch_size(", ranges.size(), ")");
    if (ranges.empty()) return;
    AdamRange* dev = upload_ranges(p, ranges, scratch);
    // Inside a step, lr and t are baked into this launch: a replay with others goes back to op by op.
    if (replayed(signature::adam_step, p, m, v, g, ranges, h, scratch)) return;
    kc::adam_step(p.data(), m.data(), v.data(), g.data(), dev, static_cast<int>(ranges.size()), ranges.back().end, h);
  }
  size_t sum_squares_scratch_size() const override { return floats_for<double>(kc::sum_squares_scratch_size()); }
  // The clipped step's scratch: its doubles (the partial sums, the decision, whose first two are
  // clipped_adam_sums'), then the ranges.
  size_t clipped_adam_scratch_size(size_t ranges) const override {
    return floats_for<double>(kc::clipped_adam_scratch_size()) + adam_scratch_size(ranges);
  }
  std::optional<std::array<double, 2>> clipped_adam_step(Span p, Span m, Span v, CSpan g, CSpan g_all, CSpan gate,
                                                         std::span<const AdamRange> ranges, const AdamPlan& plan,
                                                         float max_norm, Span scratch) override {
    check(scratch.size() >= clipped_adam_scratch_size(ranges.size()), "adam_step (cuda): scratch of ", scratch.size(),
          " floats: expected clipped_adam_scratch_size(", ranges.size(), ")");
    auto* doubles = reinterpret_cast<double*>(scratch.data());  // the workspace's spans are 64-byte aligned
    AdamRange* dev = upload_ranges(p, ranges, scratch.subspan(floats_for<double>(kc::clipped_adam_scratch_size())));
    // lr and the bias corrections (from t) of each case, and the plan's counters, are the step's scalars.
    const kc::AdamChoice* choice_dev = kc::step_graph().scalar(kc::adam_choice(plan));
    // The element count and the grid follow the last range's end: baked in, so in the signature.
    if (replayed("clipped_adam_step", p, m, v, g, g_all, gate, ranges.size(), ranges.empty() ? 0 : ranges.back().end,
                 max_norm, scratch))
      return {};
    kc::clipped_adam_step(p.data(), m.data(), v.data(), g.data(), g_all.data(), g_all.size(), gate.data(), gate.size(),
                          dev, static_cast<int>(ranges.size()), ranges.empty() ? 0 : ranges.back().end, plan, max_norm,
                          doubles, choice_dev);
    return {};  // on the device: clipped_adam_sums reads them after the step
  }
  std::array<double, 2> clipped_adam_sums(Span scratch) override {
    refuse_inside_step("clipped_adam_sums");
    return kc::clipped_adam_sums(reinterpret_cast<const double*>(scratch.data()));
  }
  CSpan clipped_adam_sums_span(CSpan scratch) const override {
    const size_t at = floats_for<double>(kc::clipped_adam_sums_offset());
    check(scratch.size() >= at + 4, "clipped_adam_sums_span (cuda): scratch of ", scratch.size(), " floats");
    return scratch.subspan(at, 4);
  }
  uint64_t read_later(std::span<const CSpan> parts) override {
    refuse_inside_step("read_later");
    std::vector<kc::HostCopies::Part> bytes;
    bytes.reserve(parts.size());
    for (CSpan part : parts) bytes.push_back({part.data(), part.size_bytes()});
    return kc::host_copies().read_later(bytes, "read_later");
  }
  void take(uint64_t id, std::span<float> dst) override {
    refuse_inside_step("take");
    kc::host_copies().take(id, dst.data(), dst.size_bytes(), "take");
  }
  double sum_squares(CSpan x, Span scratch) override {
    refuse_inside_step("sum_squares");
    check(scratch.size() >= sum_squares_scratch_size(), "sum_squares (cuda): scratch of ", scratch.size(),
          " floats: expected sum_squares_scratch_size()");
    return kc::sum_squares(x.data(), x.size(), reinterpret_cast<double*>(scratch.data()));
  }

  bool queues_whole_steps() const override { return true; }
  void begin_step(uint64_t key) override { kc::step_graph().begin(key); }
  void end_step() override { kc::step_graph().end(); }
  bool cancel_step() noexcept override { return kc::step_graph().cancel(); }

 private:
  // The ranges into the start of scratch, after checking that the last one ends within the parameters: inside a
  // step staged with it (step_graph.h), else asynchronously (cuda_kernels.h's upload_ranges). 8-byte alignment
  // for their size_t fields: the workspace hands out 64-byte aligned spans.
  static AdamRange* upload_ranges(Span p, std::span<const AdamRange> ranges, Span scratch) {
    check(ranges.empty() || ranges.back().end <= p.size(), "adam_step (cuda): the last range ends at ",
          ranges.empty() ? 0 : ranges.back().end, ", past the ", p.size(), " parameters");
    auto* dev = reinterpret_cast<AdamRange*>(scratch.data());
    if (!kc::step_graph().upload(dev, ranges.data(), ranges.size_bytes())) kc::upload_ranges(dev, ranges, "adam_step");
    return dev;
  }

  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace qkv::ops
