// Every op of the contract (ops/ops.h) on every executor against the reference executor (ggml's
// test-backend-ops): the CPU executor under each instruction set this machine has (scalar included), the
// WebGPU executor's command stream (through the loopback: ops/webgpu_loopback.h), and CUDA where a GPU is
// present. The cases and their tolerances are ops/backend_check.cpp's, which the npm package also runs in the
// browser (WebGPU against the wasm core); one TEST per group of ops here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/backend_check.h"
#include "ops/ops.h"
#include "ops/webgpu_loopback.h"
#include "qkv/device.h"
#include "test_util.h"

namespace qkv::backend_ops_test {
namespace {

using ops::Backend;

std::vector<Backend*> executors_under_test() {
  std::vector<Backend*> out{&ops::backend(Device::CPU)};
  if (cuda_device_count() > 0) out.push_back(&ops::backend(Device::CUDA));
  // The WebGPU executor's commands, run by the loopback on the CPU executor: checks every op's encoding.
  test::webgpu_loopback();
  out.push_back(&ops::backend(Device::WebGPU));
  return out;
}

// The group's cases on every executor (the CPU under each instruction set), each output within its bound.
void check_group(const char* group) {
  for (Backend* be : executors_under_test()) {
    const auto run = [&](const std::string& who) {
      const std::vector<ops::OpCheck> results = ops::check_backend(*be, ops::reference_backend(), group);
      ASSERT_FALSE(results.empty());
      for (const ops::OpCheck& r : results)
        ASSERT_TRUE(r.ok) << who << ": " << r.name << r.detail << " (error " << r.error << ", tol " << r.tol << ")";
    };
    if (be->device() == Device::CPU)
      test::for_each_isa([&](const std::string& isa) { run(be->name() + " " + isa); });
    else
      run(be->name());
  }
}

TEST(BackendOps, CopiesFillAndAdd) { check_group("copies"); }
TEST(BackendOps, Gemm) { check_group("gemm"); }
TEST(BackendOps, LinearForwardWithItsBias) { check_group("linear"); }
TEST(BackendOps, LayerNormForwardResidualAndBackward) { check_group("layernorm"); }
TEST(BackendOps, BiasActivationForwardAndBackward) { check_group("bias_act"); }
TEST(BackendOps, DropoutMasksAreTheSameEverywhere) { check_group("dropout"); }
TEST(BackendOps, AttentionForwardBackwardAndWeights) { check_group("attention"); }
TEST(BackendOps, EmbeddingForwardBackward) { check_group("embedding"); }
TEST(BackendOps, MeanPoolingOverNonPadPositions) { check_group("mean_pool"); }
TEST(BackendOps, CrossEntropyAndArgmax) { check_group("crossentropy"); }
TEST(BackendOps, AdamStepOverRangesWithGapsAndTheSumOfSquares) { check_group("adam"); }
TEST(BackendOps, QuantizedProductDequantizationAndEmbedding) { check_group("quant"); }

// A wrong element is found and named: the check compares, it does not just run.
TEST(BackendOps, TheCheckFindsAWrongElement) {
  class OffByOne final : public ops::Backend {
   public:
    explicit OffByOne(Backend& inner) : in_(inner) {}
    // Everything forwarded, except that add() is one ulp-ish off in its last element.
#define QKV_FORWARD(ret, name, params, args) \
  ret name params override { return in_.name args; }
    Device device() const override { return in_.device(); }
    std::string name() const override { return "off-by-one"; }
    QKV_FORWARD(void*, allocate, (size_t b), (b))
    void free(void* p) noexcept override { in_.free(p); }
    QKV_FORWARD(void, upload, (void* d, const void* s, size_t b), (d, s, b))
    QKV_FORWARD(void, download, (void* d, const void* s, size_t b), (d, s, b))
    QKV_FORWARD(void, copy, (void* d, const void* s, size_t b), (d, s, b))
    QKV_FORWARD(void, copy_rows, (float* d, int ld, const float* s, int ls, int r, int c), (d, ld, s, ls, r, c))
    QKV_FORWARD(void, fill, (Span x, float v), (x, v))
    QKV_FORWARD(void, synchronize, (const char* op), (op))
    QKV_FORWARD(void, gemm,
                (bool ta, bool tb, int M, int N, int K, float al, const float* A, int lda, const float* B, int ldb,
                 float be, float* C, int ldc),
                (ta, tb, M, N, K, al, A, lda, B, ldb, be, C, ldc))
    void add(Span out, CSpan a, CSpan b) override {
      in_.add(out, a, b);
      if (out.size() > 4) in_.fill(out.last(1), 1e3f);
    }
    QKV_FORWARD(void, layernorm_forward, (Span y, Span m, Span r, CSpan x, CSpan w, CSpan b, int R, int C),
                (y, m, r, x, w, b, R, C))
    QKV_FORWARD(void, residual_layernorm_forward,
                (Span r, Span y, Span m, Span s, CSpan x, CSpan f, CSpan w, CSpan b, int R, int C),
                (r, y, m, s, x, f, w, b, R, C))
    QKV_FORWARD(size_t, layernorm_backward_scratch_size, (int r, int c) const, (r, c))
    QKV_FORWARD(void, layernorm_backward,
                (Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan m, CSpan r, int R, int C,
                 Span s),
                (dx, dw, db, dr, dy, x, w, m, r, R, C, s))
    QKV_FORWARD(void, bias_act_forward, (Span a, Span h, CSpan b, ops::Act act, int r, int n), (a, h, b, act, r, n))
    QKV_FORWARD(size_t, bias_act_backward_scratch_size, (int r, int n) const, (r, n))
    QKV_FORWARD(void, bias_act_backward, (Span dh, Span db, CSpan da, CSpan h, ops::Act act, int r, int n, Span s),
                (dh, db, da, h, act, r, n, s))
    QKV_FORWARD(void, dropout_forward, (Span y, CSpan x, float p, uint64_t s), (y, x, p, s))
    QKV_FORWARD(void, dropout_backward, (Span dx, CSpan dy, float p, uint64_t s), (dx, dy, p, s))
    QKV_FORWARD(size_t, attention_scratch_size, (const ops::AttentionShape& s, int t) const, (s, t))
    QKV_FORWARD(void, attention_forward,
                (Span o, Span l, const float* q, const float* k, const float* v, const ops::AttentionShape& s, Span sc),
                (o, l, q, k, v, s, sc))
    QKV_FORWARD(void, attention_backward,
                (float* dq, float* dk, float* dv, CSpan d, const float* q, const float* k, const float* v, CSpan o,
                 CSpan l, const ops::AttentionShape& s, Span sc),
                (dq, dk, dv, d, q, k, v, o, l, s, sc))
    QKV_FORWARD(void, attention_weights, (Span a, const float* q, const float* k, const ops::AttentionShape& s),
                (a, q, k, s))
    QKV_FORWARD(void, embedding_forward, (Span x, const ops::Ids& t, CSpan w, CSpan p, float s, int B, int T, int C),
                (x, t, w, p, s, B, T, C))
    QKV_FORWARD(size_t, embedding_backward_scratch_size, (int V, int r) const, (V, r))
    QKV_FORWARD(void, embedding_backward,
                (Span dw, Span dp, CSpan dx, const ops::Ids& t, float s, int B, int T, int C, Span sc),
                (dw, dp, dx, t, s, B, T, C, sc))
    QKV_FORWARD(void, mean_pool_forward, (Span o, CSpan x, const uint8_t* k, int B, int T, int C), (o, x, k, B, T, C))
    QKV_FORWARD(void, mean_pool_backward, (Span d, CSpan o, const uint8_t* k, int B, int T, int C), (d, o, k, B, T, C))
    QKV_FORWARD(void, crossentropy_forward, (Span l, CSpan z, const ops::Ids& t, int r, int V, int ig, float s),
                (l, z, t, r, V, ig, s))
    QKV_FORWARD(void, crossentropy_forward_backward,
                (Span l, Span d, CSpan z, const ops::Ids& t, float sc, int r, int V, int ig, float s),
                (l, d, z, t, sc, r, V, ig, s))
    QKV_FORWARD(void, argmax_rows, (std::span<int32_t> b, CSpan z, int r, int V), (b, z, r, V))
    QKV_FORWARD(size_t, adam_scratch_size, (size_t r) const, (r))
    QKV_FORWARD(void, adam_step,
                (Span p, Span m, Span v, CSpan g, std::span<const ops::AdamRange> r, const ops::AdamHyper& h, Span s),
                (p, m, v, g, r, h, s))
    QKV_FORWARD(void, gemm_quant,
                (int M, int N, int K, const float* A, int lda, int f, const uint8_t* W, const float* s, float* C,
                 int ldc, bool i8),
                (M, N, K, A, lda, f, W, s, C, ldc, i8))
    QKV_FORWARD(void, dequantize_rows, (float* o, int ld, int f, const uint8_t* W, const float* s, int rows, int K),
                (o, ld, f, W, s, rows, K))
    QKV_FORWARD(void, embedding_forward_quant,
                (Span x, const ops::Ids& t, int f, const uint8_t* w, const float* ws, CSpan p, float s, int B, int T,
                 int C),
                (x, t, f, w, ws, p, s, B, T, C))
    QKV_FORWARD(size_t, sum_squares_scratch_size, () const, ())
    QKV_FORWARD(double, sum_squares, (CSpan x, Span s), (x, s))
#undef QKV_FORWARD
   private:
    Backend& in_;
  };
  OffByOne wrong(ops::backend(Device::CPU));
  size_t bad = 0;
  for (const ops::OpCheck& r : ops::check_backend(wrong, ops::reference_backend(), "copies")) {
    if (r.ok) continue;
    ++bad;  // the sum, and the copy made of it
    EXPECT_TRUE(r.name.ends_with(": add") || r.name.ends_with(": copy")) << r.name;
    EXPECT_NE(r.detail.find("= 1000.000000, reference"), std::string::npos) << r.detail;
    EXPECT_GT(r.error, r.tol);
  }
  EXPECT_GT(bad, 0u);
  EXPECT_NE(test::message_of([] {
              ops::check_backend(ops::backend(Device::CPU), ops::reference_backend(), "gem");
            }).find("group = \"gem\" is unknown"),
            std::string::npos);
}

TEST(BackendOps, CudaIsCheckedWhereAGpuIsPresent) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << cuda_unavailable_reason() << ": the cases above ran the CPU and WebGPU-stream executors only";
  EXPECT_EQ(executors_under_test().size(), 3u);
}

}  // namespace
}  // namespace qkv::backend_ops_test
