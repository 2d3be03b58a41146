// The model side of a training step launched as one unit (ops.h: Backend::begin_step), on every machine: a CPU
// executor that defers a step's ops as CUDA graphs do (ops/step_recorder.h's bookkeeping, the CUDA backend's own):
// the first step of a shape runs op by op, the second is recorded as closures and run at end_step, later steps
// only walk the model code, check each op's arguments against the recording and stage the values that change
// (dropout seeds, the loss's scale, Adam's hyper-parameters, the optimizer's ranges) into a block that the
// recorded closures read when end_step runs them. Nothing inside a step may wait (download, sum_squares, ...).
// Judged against the plain CPU backend, bit for bit (which takes a step in the checked order: the loss read and
// checked before the backward, the norm on the host): losses, weights, moments and step counts, for the three
// models with dropout, a warmup, moving padding, a shape that changes and comes back, a workspace that moves
// under the same shape (the replay diverges, the step runs again op by op), and non-finite steps.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/device_fixtures.h"
#include "models/step_cases.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "ops/step_recorder.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::deferred_step_test {
namespace {

using ops::Act;
using ops::AdamHyper;
using ops::AdamPlan;
using ops::AdamRange;
using ops::AttentionShape;
using ops::Ids;
using ops::StepRecorder;
using ops::StepSignature;
namespace signature = ops::signature;
using test::ids;

class DeferringBackend final : public ops::Backend {
 public:
  explicit DeferringBackend(ops::Backend& cpu) : cpu_(cpu), block_(kBlockBytes) {
    recorder_.set_block(block_.data(), block_.size());
  }
  StepRecorder& recorder() { return recorder_; }
  // The clipped step number `n` (0-based, as run) sees a non-finite gradient norm: a skip, or under
  // NonFinite::Error a refusal, that leaves the weights as they were.
  void poison_clipped_step(long long n) { poison_ = n; }
  // The next take() fails, as a device that failed would (its error).
  void fail_next_take() { fail_take_ = true; }
  void take(uint64_t id, std::span<float> dst) override {
    cpu_.take(id, dst);
    if (std::exchange(fail_take_, false)) throw Error("take: an injected device failure");
  }
  uint64_t read_later(std::span<const CSpan> parts) override {
    refuse_inside_step("read_later");
    return cpu_.read_later(parts);
  }

  Device device() const override { return Device::CPU; }
  std::string name() const override { return "deferring " + cpu_.name(); }

  void* allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  void free(void* p) noexcept override { cpu_.free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (!recorder_.active()) return cpu_.upload(dst, src, bytes);
    const bool skip = skipped(StepSignature::of("upload", dst, bytes));
    const unsigned char* from = stage(src, bytes, 16);
    if (!skip) queue([=, this] { cpu_.upload(dst, from, bytes); });
  }
  void download(void* dst, const void* src, size_t bytes) override {
    refuse_inside_step("download");
    cpu_.download(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    op(StepSignature::of("copy", dst, src, bytes), [=, this] { cpu_.copy(dst, src, bytes); });
  }
  void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) override {
    op(signature::copy_rows(dst, ld_dst, src, ld_src, rows, cols).h,
       [=, this] { cpu_.copy_rows(dst, ld_dst, src, ld_src, rows, cols); });
  }
  void fill(Span x, float value) override {
    op(signature::fill(x, value).h, [=, this] { cpu_.fill(x, value); });
  }
  void synchronize(const char* what) override {
    refuse_inside_step("synchronize");
    cpu_.synchronize(what);
  }
  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    op(signature::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc).h,
       [=, this] { cpu_.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
  }
  void add(Span out, CSpan a, CSpan b) override {
    op(signature::add(out, a, b).h, [=, this] { cpu_.add(out, a, b); });
  }
  void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C) override {
    op(signature::layernorm_forward(y, mean, rstd, x, w, b, rows, C).h,
       [=, this] { cpu_.layernorm_forward(y, mean, rstd, x, w, b, rows, C); });
  }
  void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b, int rows,
                                  int C) override {
    op(signature::residual_layernorm_forward(r, y, mean, rstd, x, f, w, b, rows, C).h,
       [=, this] { cpu_.residual_layernorm_forward(r, y, mean, rstd, x, f, w, b, rows, C); });
  }
  size_t layernorm_backward_scratch_size(int rows, int C) const override {
    return cpu_.layernorm_backward_scratch_size(rows, C);
  }
  void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                          int rows, int C, Span scratch) override {
    op(signature::layernorm_backward(dx, dw, db, dr, dy, x, w, mean, rstd, rows, C, scratch).h,
       [=, this] { cpu_.layernorm_backward(dx, dw, db, dr, dy, x, w, mean, rstd, rows, C, scratch); });
  }
  // As the CUDA backend's ReLU epilogue leaves it, h is unwritten under ReLU (ops.h): here it is poisoned, so that a
  // model reading it after all differs from the plain CPU's run.
  void linear_forward(Span a, Span h, CSpan x, CSpan w, CSpan b, Act act, int rows, int in, int out) override {
    Backend::linear_forward(a, h, x, w, b, act, rows, in, out);
    if (act == Act::ReLU && a.data() != h.data())
      fill(h.first(static_cast<size_t>(rows) * out), std::numeric_limits<float>::quiet_NaN());
  }
  void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N) override {
    op(signature::bias_act_forward(a, h, b, act, rows, N).h,
       [=, this] { cpu_.bias_act_forward(a, h, b, act, rows, N); });
  }
  size_t bias_act_backward_scratch_size(int rows, int N) const override {
    return cpu_.bias_act_backward_scratch_size(rows, N);
  }
  void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N, Span scratch) override {
    op(signature::bias_act_backward(dh, db, da, h, act, rows, N, scratch).h,
       [=, this] { cpu_.bias_act_backward(dh, db, da, h, act, rows, N, scratch); });
  }
  // The seeds are the step's values: read from the block when the recorded work runs.
  void dropout_forward(Span y, CSpan x, float p, uint64_t seed) override {
    const uint64_t* s = scalar(seed);
    op(signature::dropout_forward(y, x, p, seed).h, [=, this] { cpu_.dropout_forward(y, x, p, s ? *s : seed); });
  }
  void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed) override {
    const uint64_t* s = scalar(seed);
    op(signature::dropout_backward(dx, dy, p, seed).h, [=, this] { cpu_.dropout_backward(dx, dy, p, s ? *s : seed); });
  }
  size_t attention_scratch_size(const AttentionShape& s, int tasks) const override {
    return cpu_.attention_scratch_size(s, tasks);
  }
  void attention_forward(Span out, Span lse, const float* q, const float* k, const float* v, const AttentionShape& s,
                         Span scratch) override {
    const uint64_t* seed = scalar(s.seed);
    op(signature::attention_forward(out, lse, q, k, v, s, scratch).h,
       [=, this] { cpu_.attention_forward(out, lse, q, k, v, with_seed(s, seed), scratch); });
  }
  void attention_backward(float* dq, float* dk, float* dv, CSpan dout, const float* q, const float* k, const float* v,
                          CSpan out, CSpan lse, const AttentionShape& s, Span scratch) override {
    const uint64_t* seed = scalar(s.seed);
    op(signature::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s, scratch).h,
       [=, this] { cpu_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, with_seed(s, seed), scratch); });
  }
  void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s) override {
    op(signature::attention_weights(att, q, k, s).h, [=, this] { cpu_.attention_weights(att, q, k, s); });
  }
  void embedding_forward(Span x, const Ids& tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C) override {
    op(signature::embedding_forward(x, tokens, wte, pos, scale, B, T, C).h,
       [=, this] { cpu_.embedding_forward(x, tokens, wte, pos, scale, B, T, C); });
  }
  // The quantized ops: Ids holds a span, captured by value like the others' (the host ids outlive the step).
  void embedding_forward_quant(Span x, const Ids& tokens, int format, const uint8_t* wte, const float* wte_scales,
                               CSpan pos, float scale, int B, int T, int C) override {
    op(signature::embedding_forward_quant(x, tokens, format, wte, wte_scales, pos, scale, B, T, C).h,
       [=, this] { cpu_.embedding_forward_quant(x, tokens, format, wte, wte_scales, pos, scale, B, T, C); });
  }
  void gemm_quant(int M, int N, int K, const float* A, int lda, int format, const uint8_t* W, const float* scales,
                  float* C, int ldc, bool int8_act) override {
    op(signature::gemm_quant(M, N, K, A, lda, format, W, scales, C, ldc, int8_act).h,
       [=, this] { cpu_.gemm_quant(M, N, K, A, lda, format, W, scales, C, ldc, int8_act); });
  }
  void dequantize_rows(float* out, int ld_out, int format, const uint8_t* W, const float* scales, int rows,
                       int K) override {
    op(signature::dequantize_rows(out, ld_out, format, W, scales, rows, K).h,
       [=, this] { cpu_.dequantize_rows(out, ld_out, format, W, scales, rows, K); });
  }
  size_t embedding_backward_scratch_size(int V, int rows) const override {
    return cpu_.embedding_backward_scratch_size(V, rows);
  }
  void embedding_backward(Span dwte, Span dpos, CSpan dx, const Ids& tokens, float scale, int B, int T, int C,
                          Span scratch) override {
    op(signature::embedding_backward(dwte, dpos, dx, tokens, scale, B, T, C, scratch).h,
       [=, this] { cpu_.embedding_backward(dwte, dpos, dx, tokens, scale, B, T, C, scratch); });
  }
  void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C) override {
    op(signature::mean_pool_forward(out, x, key_pad, B, T, C).h,
       [=, this] { cpu_.mean_pool_forward(out, x, key_pad, B, T, C); });
  }
  void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C) override {
    op(signature::mean_pool_backward(dx, dout, key_pad, B, T, C).h,
       [=, this] { cpu_.mean_pool_backward(dx, dout, key_pad, B, T, C); });
  }
  void crossentropy_forward(Span losses, CSpan logits, const Ids& targets, int rows, int V, int ignore_index,
                            float smoothing) override {
    op(signature::crossentropy_forward(losses, logits, targets, rows, V, ignore_index, smoothing).h,
       [=, this] { cpu_.crossentropy_forward(losses, logits, targets, rows, V, ignore_index, smoothing); });
  }
  // The scale (weight / the rows that count) changes with the targets: the step's value.
  void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const Ids& targets, float scale, int rows,
                                     int V, int ignore_index, float smoothing) override {
    const float* s = scalar(scale);
    op(signature::crossentropy_forward_backward(losses, dlogits, logits, targets, scale, rows, V, ignore_index,
                                                smoothing)
           .h,
       [=, this] {
         cpu_.crossentropy_forward_backward(losses, dlogits, logits, targets, s ? *s : scale, rows, V, ignore_index,
                                            smoothing);
       });
  }
  void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V) override {
    op(signature::argmax_rows(best, logits, rows, V).h, [=, this] { cpu_.argmax_rows(best, logits, rows, V); });
  }
  size_t adam_scratch_size(size_t ranges) const override { return cpu_.adam_scratch_size(ranges); }
  void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h,
                 Span scratch) override {
    refuse_inside_step("adam_step");  // the optimizer takes the clipped step
    cpu_.adam_step(p, m, v, g, ranges, h, scratch);
  }
  size_t sum_squares_scratch_size() const override { return cpu_.sum_squares_scratch_size(); }
  double sum_squares(CSpan x, Span scratch) override {
    refuse_inside_step("sum_squares");
    return cpu_.sum_squares(x, scratch);
  }
  // The scratch: the sums (two doubles) and the plan's AdamState on the "device", as the CUDA backend keeps them,
  // then the CPU's.
  static constexpr size_t kOwnScratch = 16;  // 64 bytes: the CPU's part keeps the alignment
  size_t clipped_adam_scratch_size(size_t ranges) const override {
    return kOwnScratch + cpu_.clipped_adam_scratch_size(ranges);
  }
  // The ranges (host memory) and the plan (lr and t of each case, its counters) are the step's values.
  std::optional<std::array<double, 2>> clipped_adam_step(Span p, Span m, Span v, CSpan g, CSpan g_all, CSpan gate,
                                                         std::span<const AdamRange> ranges, const AdamPlan& plan,
                                                         float max_norm, Span scratch) override {
    const AdamRange* staged = ranges.data();
    const AdamPlan* staged_plan = &plan;
    if (recorder_.active()) {
      staged = reinterpret_cast<const AdamRange*>(stage(ranges.data(), ranges.size_bytes(), 16));
      staged_plan = scalar(plan);
    }
    const size_t n = ranges.size();
    // As the CUDA decision kernel: the sums, then ops::adam_pick on the state, then the update with the pick's
    // hyper-parameters (the CPU's clipped step, from a plan of that one case).
    const auto work = [=, this] {
      auto* sums = reinterpret_cast<double*>(scratch.data());
      auto* state = reinterpret_cast<ops::AdamState*>(scratch.data() + 4);
      const Span cpu_scratch = scratch.subspan(kOwnScratch);
      const Span sum_scratch = cpu_scratch.first(cpu_.sum_squares_scratch_size());
      sums[0] = cpu_.sum_squares(g_all, sum_scratch);
      sums[1] = gate.empty() ? 0.0 : cpu_.sum_squares(gate, sum_scratch);
      const AdamPlan& pl = *staged_plan;
      if (clipped_steps_++ == poison_) sums[0] = std::numeric_limits<double>::infinity();
      const int j = ops::adam_pick(pl.ahead, pl.base, pl.epoch, pl.halt,
                                   std::isfinite(sums[0]) && std::isfinite(sums[1]), *state);
      if (j < 0) return;
      cpu_.clipped_adam_step(p, m, v, g, g_all, {}, {staged, n}, AdamPlan::of(pl.hyper[j]), max_norm, cpu_scratch);
    };
    if (!recorder_.active()) {
      work();
    } else {
      op(StepSignature::of("clipped_adam_step", p, m, v, g, g_all, gate, n, max_norm, scratch), work);
    }
    return {};  // known when the work has run: clipped_adam_sums
  }
  std::array<double, 2> clipped_adam_sums(Span scratch) override {
    refuse_inside_step("clipped_adam_sums");
    std::array<double, 2> sums;
    std::memcpy(sums.data(), scratch.data(), sizeof sums);
    return sums;
  }
  CSpan clipped_adam_sums_span(CSpan scratch) const override { return scratch.first(4); }

  bool queues_whole_steps() const override { return true; }
  void begin_step(uint64_t key) override {
    if (recorder_.begin(key) == StepRecorder::Mode::Capture) recording_.clear();
  }
  void end_step() override {
    switch (recorder_.mode()) {
      case StepRecorder::Mode::Replay:
        if (!recorder_.end_replay()) retry(false);
        break;
      case StepRecorder::Mode::Capture: destroy(recorder_.captured(new Recording(std::move(recording_)))); break;
      default: recorder_.end_eager(); return;
    }
    // The "launch": the recorded work reads the block as this step's walk left it.
    for (const auto& work : *static_cast<Recording*>(recorder_.handle())) work();
  }
  ~DeferringBackend() override {
    for (void* h : recorder_.drop_all()) destroy(h);
  }
  bool cancel_step() noexcept override {
    recorder_.end_eager();
    return false;
  }

 private:
  static constexpr size_t kBlockBytes = 1 << 16;

  bool skipped(uint64_t signature) {
    switch (recorder_.op(signature)) {
      case StepRecorder::Op::Run: return false;
      case StepRecorder::Op::Skip: return true;
      case StepRecorder::Op::Diverged: break;
    }
    retry(false);
  }
  // Eager: run now; capture: record; replay: run nothing (the recording runs at end_step).
  template <class F>
  void op(uint64_t signature, F&& work) {
    if (!recorder_.active()) return work();
    if (!skipped(signature)) queue(std::forward<F>(work));
  }
  template <class F>
  void queue(F&& work) {
    recording_.emplace_back(std::forward<F>(work));
  }
  const unsigned char* stage(const void* bytes, size_t size, size_t align) {
    if (!recorder_.active()) return nullptr;
    const size_t at = recorder_.stage(bytes, size, align);
    if (at == StepRecorder::kNotStaged) retry(true);
    return block_.data() + at;
  }
  template <class T>
  const T* scalar(const T& value) {
    return reinterpret_cast<const T*>(stage(&value, sizeof(T), alignof(T)));
  }
  static AttentionShape with_seed(AttentionShape s, const uint64_t* seed) {
    if (seed) s.seed = *seed;
    return s;
  }
  [[noreturn]] void retry(bool forget_key) {
    destroy(recorder_.fail(forget_key));
    throw ops::StepRetry();
  }
  using Recording = std::vector<std::function<void()>>;  // a "graph": the handle the recorder keeps
  static void destroy(void* handle) { delete static_cast<Recording*>(handle); }
  void refuse_inside_step(const char* what) {
    check(!recorder_.active(), what, " inside a training step launched as one unit");
  }

  ops::Backend& cpu_;
  StepRecorder recorder_;
  std::vector<unsigned char> block_;
  Recording recording_;  // the capture under way
  long long clipped_steps_ = 0, poison_ = -1;
  bool fail_take_ = false;
};

// Makes models created on the CPU run through the deferring executor while it lives.
struct Deferring {
  ops::Backend& cpu = ops::backend(Device::CPU);
  DeferringBackend backend{cpu};
  ops::Backend* before = ops::set_cpu_backend_for_tests(&backend);
  ~Deferring() { ops::set_cpu_backend_for_tests(before); }
};

// Runs `steps` on a model made by `make` under the deferring executor and on a twin on the plain CPU backend;
// every loss and the final checkpoints (weights, moments, step counts) must be the same bits, with at least
// `min_replays` steps replayed and `retries` steps run again. lag >= 0: the deferred model's steps are queued
// (queue_train_step), each loss read `lag` steps later (test::run_steps); the plain twin takes train_step's.
template <class Model>
void expect_deferred_agrees(const std::function<std::unique_ptr<Model>()>& make, const test::StepCase<Model>& c,
                            long long retries = 0, int lag = -1) {
  std::vector<float> got, want;
  std::unique_ptr<Model> deferred;
  StepRecorder::Counts counts;
  {
    Deferring d;
    deferred = make();
    got = test::run_steps(*deferred, c, lag);
    counts = d.backend.recorder().counts();
    // The model keeps the deferring executor: saving only downloads, which it allows outside a step.
    const std::unique_ptr<Model> plain = [&] {
      ops::set_cpu_backend_for_tests(nullptr);
      return make();
    }();
    want = test::run_steps(*plain, c);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_GE(counts.replayed, c.min_replays) << "the steps were not replayed";
    EXPECT_GE(counts.captured, 1);
    EXPECT_EQ(counts.retried, retries);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(test::same_bits(got[i], want[i]))
          << "step " << i << ": deferred " << got[i] << ", op by op " << want[i];
    EXPECT_EQ(deferred->step(), plain->step());
    EXPECT_EQ(deferred->skipped_steps(), plain->skipped_steps());
    EXPECT_TRUE(deferred->save(true) == plain->save(true)) << "weights or moments differ";
    deferred.reset();  // before the executor it runs on goes
  }
}

TEST(DeferredStep, LanguageModelStepsReplayedAreTheStepsRunOpByOp) {
  expect_deferred_agrees<LanguageModel>(
      [] { return std::make_unique<LanguageModel>(test::lm_config_with_dropout(), test::changing_optimizer()); },
      test::lm_shape_steps());
}

TEST(DeferredStep, Seq2SeqWithMovingPaddingAndClassifiers) {
  expect_deferred_agrees<Seq2Seq>(
      [] { return std::make_unique<Seq2Seq>(test::seq2seq_config_with_dropout(), test::changing_optimizer()); },
      test::seq2seq_padding_steps());
  for (Pooling pooling : {Pooling::First, Pooling::Mean})
    expect_deferred_agrees<Classifier>(
        [pooling] {
          return std::make_unique<Classifier>(test::classifier_config_with_dropout(pooling),
                                              test::changing_optimizer());
        },
        test::classifier_steps());
}

// LoRA adapters (Model::add_lora) train through the same step: on a float32 base with the adapters' dropout and on
// a frozen int8 base (its backward through dequantized rows), the deferred steps' losses and the adapters' values
// and moments are the op-by-op ones, bit for bit, and the base does not move.
TEST(DeferredStep, LoraAdaptersOnAFloatAndAQuantizedBase) {
  for (bool quantized : {false, true}) {
    const auto make = [quantized] {
      auto m = std::make_unique<LanguageModel>(test::lm_config_with_dropout(), test::changing_optimizer());
      if (quantized) m->quantize(WeightFormat::Int8);
      LoraOptions o;
      o.rank = 2;
      o.dropout = 0.1f;
      o.targets = {"q", "v", "out", "up", "down", "head"};
      m->add_lora(o);
      return m;
    };
    const test::StepCase<LanguageModel> c = test::lm_shape_steps();
    Deferring d;
    std::unique_ptr<LanguageModel> deferred = make();
    std::vector<std::vector<float>> base;  // the float32 tensors (a packed one has no host values)
    for (const auto& p : deferred->parameters()) base.emplace_back(p.value.begin(), p.value.end());
    const std::vector<float> got = test::run_steps(*deferred, c);
    const StepRecorder::Counts counts = d.backend.recorder().counts();
    ops::set_cpu_backend_for_tests(nullptr);
    const std::unique_ptr<LanguageModel> plain = make();
    ops::set_cpu_backend_for_tests(&d.backend);
    const std::vector<float> want = test::run_steps(*plain, c);
    EXPECT_GE(counts.replayed, c.min_replays) << "the steps were not replayed";
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(test::same_bits(got[i], want[i]))
          << "step " << i << ": deferred " << got[i] << ", op by op " << want[i];
    EXPECT_EQ(deferred->step(), plain->step());
    const auto a = deferred->lora_parameters(), b = plain->lora_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(a[i].value.data(), b[i].value.data(), a[i].value.size_bytes())) << a[i].name;
      EXPECT_EQ(0, std::memcmp(a[i].m.data(), b[i].m.data(), a[i].m.size_bytes())) << a[i].name;
      EXPECT_EQ(0, std::memcmp(a[i].v.data(), b[i].v.data(), a[i].v.size_bytes())) << a[i].name;
    }
    const auto after = deferred->parameters();
    for (size_t i = 0; i < after.size(); ++i)
      EXPECT_EQ(std::vector<float>(after[i].value.begin(), after[i].value.end()), base[i])
          << "the frozen base moved: " << after[i].name;
    deferred.reset();  // before the executor it runs on goes
  }
}

// An evaluation of a larger batch between steps moves the workspace: the next step's replay meets other
// pointers under the same shape, and is run again op by op (then captured anew), with the same bits.
TEST(DeferredStep, AWorkspaceThatMovesUnderTheSameShapeRunsTheStepAgain) {
  test::StepCase<LanguageModel> c{{}, 4};
  const int B = 2, T = 8;
  for (int s = 0; s < 9; ++s)
    c.steps.push_back([s](LanguageModel& m, bool queued) {
      if (s == 4) m.evaluate(ids(6, 12, 17, 1), ids(6, 12, 17, 2), 6, 12);  // (6, 12) > (2, 8): a new workspace
      return test::train(m, queued, ids(B, T, 17, 100 + s), ids(B, T, 17, 200 + s), B, T);
    });
  expect_deferred_agrees<LanguageModel>(
      [] { return std::make_unique<LanguageModel>(test::lm_config_with_dropout(), test::changing_optimizer()); }, c, 1);
}

// Non-finite steps inside replays answer as op by op: under Skip the same steps are skipped (the gate kept the
// update from happening), under Error the loss's message with the weights, moments and t unchanged.
TEST(DeferredStep, NonFiniteStepsAnswerAsOpByOp) {
  const LanguageModelConfig c = test::lm_config();
  expect_deferred_agrees<LanguageModel>(
      [&] { return std::make_unique<LanguageModel>(c, test::changing_optimizer(NonFinite::Skip)); },
      test::lm_nonfinite_steps());

  // Under Error: the step after the one that breaks the weights throws the loss's message and changes neither the
  // weights nor the moments nor t, as op by op.
  const auto state = [](LanguageModel& m) {
    std::vector<float> out;
    for (const ParameterView& p : m.parameters())
      for (std::span<float> x : {p.value, p.m, p.v}) out.insert(out.end(), x.begin(), x.end());
    return out;
  };
  std::vector<float> before;
  std::vector<uint8_t> got_bytes;
  std::string got_message;
  int got_step = 0;
  {
    Deferring d;
    LanguageModel strict(c, test::changing_optimizer(NonFinite::Error));
    got_message = test::lm_strict_run(strict, [&] { before = state(strict); });
    EXPECT_GE(d.backend.recorder().counts().replayed, 3);
    got_step = strict.step();
    got_bytes = strict.save(true);
    const std::vector<float> after = state(strict);
    ASSERT_EQ(after.size(), before.size());
    EXPECT_EQ(std::memcmp(after.data(), before.data(), after.size() * sizeof(float)), 0)
        << "the refused step changed the weights or moments";
  }
  LanguageModel plain(c, test::changing_optimizer(NonFinite::Error));
  EXPECT_EQ(test::lm_strict_run(plain), got_message);
  EXPECT_NE(got_message.find("the loss is not finite"), std::string::npos) << got_message;
  EXPECT_EQ(got_step, 5);
  EXPECT_EQ(plain.step(), 5);
  EXPECT_TRUE(got_bytes == plain.save(true));
}

// Steps queued without waiting (queue_train_step), their losses read 0, 1 or 2 steps late: the executor decides
// each update as the GPU does (ops/adam_plan.h: the steps in flight pick their t from the device's count), with
// the bits of train_step's steps on the plain CPU, through shapes that change and replays.
TEST(DeferredStep, QueuedStepsReadLaterAreTheStepsTakenOneByOne) {
  for (int lag : {0, 1, 2}) {
    SCOPED_TRACE("lag " + std::to_string(lag));
    expect_deferred_agrees<LanguageModel>(
        [] { return std::make_unique<LanguageModel>(test::lm_config_with_dropout(), test::changing_optimizer()); },
        test::lm_shape_steps(), 0, lag);
  }
  expect_deferred_agrees<Seq2Seq>(
      [] { return std::make_unique<Seq2Seq>(test::seq2seq_config_with_dropout(), test::changing_optimizer()); },
      test::seq2seq_padding_steps(), 0, 2);
  expect_deferred_agrees<Classifier>(
      [] {
        return std::make_unique<Classifier>(test::classifier_config_with_dropout(Pooling::Mean),
                                            test::changing_optimizer());
      },
      test::classifier_steps(), 0, 1);
}

// Skipped steps in flight: the steps behind a skip take the t it did not use, as one by one. The executor poisons
// one step's gradient norm (a skip that leaves the weights good, so the steps behind it are taken); the twin takes
// train_step's steps on the same executor, poisoned alike.
TEST(DeferredStep, QueuedStepsBehindASkippedOneTakeItsStepNumber) {
  const LanguageModelConfig c = test::lm_config_with_dropout();
  const auto run = [&](int lag, int poison) {
    Deferring d;
    d.backend.poison_clipped_step(poison);
    LanguageModel m(c, test::changing_optimizer(NonFinite::Skip));
    const std::vector<float> losses = test::run_steps(m, test::lm_shape_steps(), lag);
    EXPECT_EQ(m.skipped_steps(), poison >= 0 ? 1 : 0);
    return std::make_pair(losses, m.save(true));
  };
  for (int poison : {3, 9}) {
    const auto want = run(-1, poison);
    for (int lag : {1, 2}) {
      SCOPED_TRACE("poisoned step " + std::to_string(poison) + ", lag " + std::to_string(lag));
      const auto got = run(lag, poison);
      ASSERT_EQ(got.first.size(), want.first.size());
      for (size_t i = 0; i < got.first.size(); ++i)
        EXPECT_TRUE(test::same_bits(got.first[i], want.first[i]))
            << "step " << i << ": queued " << got.first[i] << ", one by one " << want.first[i];
      EXPECT_TRUE(got.second == want.second) << "weights or moments differ";
    }
  }
  // The skip changed the run: the twin without it differs (the check above can fail).
  EXPECT_FALSE(run(-1, 3).second == run(-1, -1).second);
  // Each StepLoss says whether its step was skipped, without settling the steps behind it.
  {
    Deferring d;
    d.backend.poison_clipped_step(2);
    LanguageModel m(c, test::changing_optimizer(NonFinite::Skip));
    std::vector<StepLoss> l;
    for (int s = 0; s < 4; ++s) l.push_back(m.queue_train_step(ids(3, 11, 17, s), ids(3, 11, 17, 50 + s), 3, 11));
    EXPECT_FALSE(l[1].skipped());
    EXPECT_TRUE(l[2].skipped());
    EXPECT_FALSE(l[3].ready());
    EXPECT_FALSE(l[3].skipped());
    EXPECT_EQ(m.skipped_steps(), 1);
    EXPECT_EQ(m.step(), 3);
  }
  // Under Skip the device never halts: the steps behind a non-finite one run (the weights blow up at step 5).
  for (int lag : {1, 2})
    expect_deferred_agrees<LanguageModel>(
        [&] { return std::make_unique<LanguageModel>(c, test::changing_optimizer(NonFinite::Skip)); },
        test::lm_nonfinite_steps(), 0, lag);
}

// Under NonFinite::Error a refused step in flight throws its loss's message from the get() that settles it, with
// the state of train_step's run (weights, moments, t, dropout passes); the step queued behind it does not run (its
// get() says so), and after loading a checkpoint the queued steps run again, with train_step's bits.
TEST(DeferredStep, AQueuedStepRefusedUnderErrorStopsTheStepsBehindIt) {
  const LanguageModelConfig c = test::lm_config_with_dropout();
  test::StrictRun got;
  {
    Deferring d;
    LanguageModel m(c, test::changing_optimizer(NonFinite::Error));
    got = test::lm_strict_pipeline(m, true);
  }
  LanguageModel plain(c, test::changing_optimizer(NonFinite::Error));
  const test::StrictRun want = test::lm_strict_pipeline(plain, false);
  EXPECT_NE(want.refused.find("the loss is not finite"), std::string::npos) << want.refused;
  EXPECT_EQ(got.refused, want.refused);
  EXPECT_NE(got.dropped.find("this training step did not run"), std::string::npos) << got.dropped;
  EXPECT_NE(got.dropped.find("the loss is not finite"), std::string::npos) << got.dropped;
  EXPECT_EQ(want.step_after_error, 5);
  EXPECT_EQ(got.step_after_error, 5);
  EXPECT_TRUE(got.after_error == want.after_error) << "the refused step (or the one behind it) changed the state";
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_TRUE(test::same_bits(got.losses[i], want.losses[i]))
        << "step " << i << ": queued " << got.losses[i] << ", one by one " << want.losses[i];
  EXPECT_TRUE(got.end == want.end) << "the steps after the error differ";
}

// The calls that read what steps leave settle the steps in flight first; a StepLoss outlives its model (the
// model settles its steps when it goes); a default StepLoss refuses get().
TEST(DeferredStep, StepLossesAreSettledByWhatReadsTheirSteps) {
  const LanguageModelConfig c = test::lm_config();
  const int B = 3, T = 11;
  Deferring d;
  StepLoss a, b;
  float want_a = 0, want_b = 0;
  {
    LanguageModel plain(c, test::changing_optimizer());
    {
      const ops::Backend* before = ops::set_cpu_backend_for_tests(nullptr);
      LanguageModel p(c, test::changing_optimizer());
      want_a = p.train_step(ids(B, T, 17, 1), ids(B, T, 17, 2), B, T);
      want_b = p.train_step(ids(B, T, 17, 3), ids(B, T, 17, 4), B, T);
      ops::set_cpu_backend_for_tests(const_cast<ops::Backend*>(before));
    }
    LanguageModel m(c, test::changing_optimizer());
    a = m.queue_train_step(ids(B, T, 17, 1), ids(B, T, 17, 2), B, T);
    EXPECT_FALSE(a.ready());
    EXPECT_EQ(m.step(), 1);  // settles
    EXPECT_TRUE(a.ready());
    b = m.queue_train_step(ids(B, T, 17, 3), ids(B, T, 17, 4), B, T);
    EXPECT_FALSE(b.ready());
  }  // the model goes with b in flight
  EXPECT_TRUE(b.ready());
  EXPECT_TRUE(test::same_bits(a.get(), want_a));
  EXPECT_TRUE(test::same_bits(b.get(), want_b));
  EXPECT_NE(test::message_of([] { StepLoss().get(); }).find("no training step"), std::string::npos);
}

// Each StepLoss answers for its own step: the get() of a step queued behind a refused one, called first, throws
// that it did not run (naming the refusal), and the refused step's get() its own error.
TEST(DeferredStep, EachStepLossThrowsItsOwnError) {
  const LanguageModelConfig c = test::lm_config();
  const int B = 3, T = 11;
  Deferring d;
  LanguageModel m(c, test::changing_optimizer(NonFinite::Error));
  for (int s = 0; s < 3; ++s) m.queue_train_step(ids(B, T, 17, s), ids(B, T, 17, 10 + s), B, T);
  m.set_learning_rate(1e30f);
  m.queue_train_step(ids(B, T, 17, 3), ids(B, T, 17, 13), B, T).get();  // breaks the weights
  const StepLoss refused = m.queue_train_step(ids(B, T, 17, 4), ids(B, T, 17, 14), B, T);
  const StepLoss behind = m.queue_train_step(ids(B, T, 17, 5), ids(B, T, 17, 15), B, T);
  const std::string first = test::message_of([&] { behind.get(); });
  EXPECT_EQ(first.rfind("this training step did not run", 0), 0u) << first;
  EXPECT_EQ(test::message_of([&] { behind.get(); }), first);
  const std::string own = test::message_of([&] { refused.get(); });
  EXPECT_EQ(own.rfind("the loss is not finite", 0), 0u) << own;
  EXPECT_NE(first.find(own), std::string::npos) << "the dropped step names the refusal";
  EXPECT_EQ(m.step(), 4);
}

// A device that fails while a step's loss comes back: that step's get() throws its error, the steps behind it
// answer that they did not run, and the model trains on afterwards.
TEST(DeferredStep, AFailedReadBackAnswersEveryStepInFlight) {
  const LanguageModelConfig c = test::lm_config();
  const int B = 3, T = 11;
  Deferring d;
  LanguageModel m(c, test::changing_optimizer());
  const StepLoss a = m.queue_train_step(ids(B, T, 17, 1), ids(B, T, 17, 2), B, T);
  const StepLoss b = m.queue_train_step(ids(B, T, 17, 3), ids(B, T, 17, 4), B, T);
  d.backend.fail_next_take();
  EXPECT_NE(test::message_of([&] { a.get(); }).find("an injected device failure"), std::string::npos);
  const std::string dropped = test::message_of([&] { b.get(); });
  EXPECT_NE(dropped.find("this training step did not run"), std::string::npos) << dropped;
  EXPECT_NE(dropped.find("an injected device failure"), std::string::npos) << dropped;
  EXPECT_TRUE(b.ready());
  const float next = m.queue_train_step(ids(B, T, 17, 5), ids(B, T, 17, 6), B, T).get();
  EXPECT_TRUE(std::isfinite(next));
}

// Bad input to queue_train_step throws at once, naming the argument, and leaves the steps in flight as they were;
// on the plain CPU (which decides on the host) the step runs at once and its StepLoss is ready.
TEST(DeferredStep, QueueTrainStepRefusesBadInputAndRunsAtOnceOnTheCpu) {
  const LanguageModelConfig c = test::lm_config();
  const int B = 3, T = 11;
  float want = 0;
  {
    LanguageModel plain(c, test::changing_optimizer());
    const StepLoss l = plain.queue_train_step(ids(B, T, 17, 1), ids(B, T, 17, 2), B, T);
    EXPECT_TRUE(l.ready());
    LanguageModel twin(c, test::changing_optimizer());
    want = twin.train_step(ids(B, T, 17, 1), ids(B, T, 17, 2), B, T);
    EXPECT_TRUE(test::same_bits(l.get(), want));
  }
  Deferring d;
  LanguageModel m(c, test::changing_optimizer());
  const StepLoss first = m.queue_train_step(ids(B, T, 17, 1), ids(B, T, 17, 2), B, T);
  std::vector<int32_t> bad = ids(B, T, 17, 3);
  bad[5] = 17;
  const std::string message = test::message_of([&] { m.queue_train_step(bad, ids(B, T, 17, 4), B, T); });
  EXPECT_NE(message.find("17"), std::string::npos) << message;
  EXPECT_NE(message.find("out of range"), std::string::npos) << message;
  EXPECT_NE(test::message_of([&] { m.queue_train_step(ids(B, T, 17, 3), ids(B, T - 1, 17, 4), B, T); }).find("targets"),
            std::string::npos);
  EXPECT_FALSE(first.ready());
  EXPECT_TRUE(test::same_bits(first.get(), want));
  EXPECT_EQ(m.step(), 1);
}

}  // namespace
}  // namespace qkv::deferred_step_test
