// The CUDA executor's ops captured into a CUDA graph (issue 25's first step towards a training step launched as
// one graph): every op of a layer's forward and backward is queued on qkv's own stream (kernels/cuda/stream.h),
// never on the legacy default stream, and none of them waits for the device, so that stream capture (in its
// strictest, global mode) accepts them. The graph, replayed, must give the eager run's bits, and must read its
// inputs where they are at replay time (new values uploaded between replays give the new results).
// The whole training step as one graph is step_graph_test.cpp's (CudaStepGraph.*).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/stream.h"
#include "ops/ops.h"
#include "test_util.h"

namespace qkv::cuda_graph_test {
namespace {

namespace kc = kernels::cuda;
using test::randn;

// A layer's worth of ops, on buffers of one backend: embedding (forward and backward: the sort on the device),
// LayerNorm, the QKV projection through linear_forward (cuBLASLt's bias epilogue where it has one), causal attention
// with dropout, a GELU feed-forward with dropout, logits, cross-entropy with its gradient, and the backward of each
// back to the embedding's output.
struct Layer {
  static constexpr int B = 2, T = 17, C = 32, H = 2, V = 11, F = 64, rows = B * T;
  ops::Backend& b;
  std::vector<float*> owned;
  int32_t* tokens = nullptr;
  int32_t* targets = nullptr;
  std::vector<int32_t> host_tokens, host_targets;

  float* make(size_t n) {
    owned.push_back(static_cast<float*>(b.allocate(n * sizeof(float))));
    return owned.back();
  }
  Span span(float* p, size_t n) { return {p, n}; }

  // Parameters and inputs.
  float *wte = make(V * C), *pos = make(T * C), *lnw = make(C), *lnb = make(C), *wqkv = make(3 * C * C),
        *bqkv = make(3 * C), *w1 = make(F * C), *b1 = make(F), *wout = make(V * F);
  // Activations and gradients.
  float *x = make(rows * C), *y = make(rows * C), *mean = make(rows), *rstd = make(rows), *qkv = make(rows * 3 * C),
        *att = make(rows * C), *lse = make(B * H * T), *h1 = make(rows * F), *a1 = make(rows * F), *d1 = make(rows * F),
        *logits = make(rows * V), *losses = make(rows), *dlogits = make(rows * V), *dwout = make(V * F),
        *dd1 = make(rows * F), *da1 = make(rows * F), *dh1 = make(rows * F), *db1 = make(F), *datt = make(rows * C),
        *dqkv = make(rows * 3 * C), *dy = make(rows * C), *dx = make(rows * C), *dlnw = make(C), *dlnb = make(C),
        *sum = make(rows * C), *copied = make(rows * C), *strided = make(rows * C), *dwte = make(V * C),
        *dpos = make(T * C);
  float* scratch = nullptr;
  size_t scratch_n = 0;

  ops::AttentionShape shape() const { return {B, T, T, C, H, 3 * C, 3 * C, nullptr, true, 0.1f, 7}; }

  explicit Layer(ops::Backend& backend) : b(backend) {
    tokens = static_cast<int32_t*>(b.allocate(rows * sizeof(int32_t)));
    targets = static_cast<int32_t*>(b.allocate(rows * sizeof(int32_t)));
    scratch_n =
        std::max({b.attention_scratch_size(shape(), B * H), b.layernorm_backward_scratch_size(rows, C),
                  b.bias_act_backward_scratch_size(rows, F), b.embedding_backward_scratch_size(V, rows), size_t{1}});
    scratch = make(scratch_n);
    set_inputs(1);
  }
  ~Layer() {
    for (float* p : owned) b.free(p);
    b.free(tokens);
    b.free(targets);
  }

  void up(float* dst, const std::vector<float>& v) { b.upload(dst, v.data(), v.size() * sizeof(float)); }
  // New values in every parameter and input, from `seed` (uploaded outside any capture).
  void set_inputs(uint64_t seed) {
    float* params[] = {wte, pos, lnw, lnb, wqkv, bqkv, w1, b1, wout};
    const size_t sizes[] = {V * C, T * C, C, C, 3 * C * C, 3 * C, F * C, F, V * F};
    for (size_t i = 0; i < std::size(params); ++i) {
      auto v = randn(sizes[i], seed * 100 + i);
      for (float& e : v) e *= 0.3f;
      up(params[i], v);
    }
    host_tokens.resize(rows);
    host_targets.resize(rows);
    for (int r = 0; r < rows; ++r) {
      host_tokens[r] = static_cast<int32_t>((r * 7 + seed) % V);
      host_targets[r] = r % 5 == 0 ? -100 : static_cast<int32_t>((r * 3 + seed * 5) % V);  // some ignored
    }
    b.upload(tokens, host_tokens.data(), rows * sizeof(int32_t));
    b.upload(targets, host_targets.data(), rows * sizeof(int32_t));
  }

  // The ops, queued; nothing here waits for the device.
  void run() {
    const ops::Ids ids{host_tokens, tokens}, tids{host_targets, targets};
    const ops::AttentionShape s = shape();
    Span sc = span(scratch, scratch_n);
    b.embedding_forward(span(x, rows * C), ids, span(wte, V * C), span(pos, T * C), 1.f, B, T, C);
    b.layernorm_forward(span(y, rows * C), span(mean, rows), span(rstd, rows), span(x, rows * C), span(lnw, C),
                        span(lnb, C), rows, C);
    b.linear_forward(span(qkv, rows * 3 * C), span(qkv, rows * 3 * C), span(y, rows * C), span(wqkv, 3 * C * C),
                     span(bqkv, 3 * C), ops::Act::Identity, rows, C, 3 * C);
    b.attention_forward(span(att, rows * C), span(lse, B * H * T), qkv, qkv + C, qkv + 2 * C, s, sc);
    b.linear_forward(span(a1, rows * F), span(h1, rows * F), span(att, rows * C), span(w1, F * C), span(b1, F),
                     ops::Act::GELU, rows, C, F);
    b.dropout_forward(span(d1, rows * F), span(a1, rows * F), 0.1f, 9);
    b.gemm(false, true, rows, V, F, 1.f, d1, F, wout, F, 0.f, logits, V);
    b.crossentropy_forward_backward(span(losses, rows), span(dlogits, rows * V), span(logits, rows * V), tids,
                                    1.f / rows, rows, V, -100, 0.1f);
    // Backward: parameter gradients accumulate, so they are zeroed inside the graph as a step does.
    b.fill(span(dwout, V * F), 0.f);
    b.gemm(true, false, V, F, rows, 1.f, dlogits, V, d1, F, 1.f, dwout, F);
    b.gemm(false, false, rows, F, V, 1.f, dlogits, V, wout, F, 0.f, dd1, F);
    b.dropout_backward(span(da1, rows * F), span(dd1, rows * F), 0.1f, 9);
    b.fill(span(db1, F), 0.f);
    b.bias_act_backward(span(dh1, rows * F), span(db1, F), span(da1, rows * F), span(h1, rows * F), ops::Act::GELU,
                        rows, F, sc);
    b.gemm(false, false, rows, C, F, 1.f, dh1, F, w1, C, 0.f, datt, C);
    b.attention_backward(dqkv, dqkv + C, dqkv + 2 * C, span(datt, rows * C), qkv, qkv + C, qkv + 2 * C,
                         span(att, rows * C), span(lse, B * H * T), s, sc);
    b.gemm(false, false, rows, C, 3 * C, 1.f, dqkv, 3 * C, wqkv, C, 0.f, dy, C);
    b.fill(span(dlnw, C), 0.f);
    b.fill(span(dlnb, C), 0.f);
    b.layernorm_backward(span(dx, rows * C), span(dlnw, C), span(dlnb, C), span(x, rows * C), span(dy, rows * C),
                         span(x, rows * C), span(lnw, C), span(mean, rows), span(rstd, rows), rows, C, sc);
    b.add(span(sum, rows * C), span(dx, rows * C), span(x, rows * C));
    b.copy(copied, sum, rows * C * sizeof(float));
    b.copy_rows(strided, C, qkv + C, 3 * C, rows, C);
    b.fill(span(dwte, V * C), 0.f);
    b.fill(span(dpos, T * C), 0.f);
    b.embedding_backward(span(dwte, V * C), span(dpos, T * C), span(dx, rows * C), ids, 1.f, B, T, C, sc);
  }

  // Every output and gradient, downloaded (waits for the device).
  std::vector<std::vector<float>> results() {
    const std::pair<float*, size_t> outs[] = {
        {logits, rows * V},   {losses, rows},  {dlogits, rows * V}, {dwout, V * F}, {db1, F},
        {dqkv, rows * 3 * C}, {dx, rows * C},  {dlnw, C},           {dlnb, C},      {copied, rows * C},
        {strided, rows * C},  {att, rows * C}, {dwte, V * C},       {dpos, T * C}};
    std::vector<std::vector<float>> r;
    for (auto [p, n] : outs) {
      r.emplace_back(n);
      b.download(r.back().data(), p, n * sizeof(float));
    }
    return r;
  }
};

// Ends a capture however the test leaves it, so that a failed capture cannot poison the stream for later tests.
struct Capture {
  cudaStream_t stream;
  cudaGraph_t graph = nullptr;
  bool open = true;
  explicit Capture(cudaStream_t s) : stream(s) {
    kc::check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "test", "cudaStreamBeginCapture");
  }
  cudaGraph_t end() {
    open = false;
    kc::check_cuda(cudaStreamEndCapture(stream, &graph), "test", "cudaStreamEndCapture");
    return graph;
  }
  ~Capture() {
    if (open) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      cudaGetLastError();
    }
    if (graph) cudaGraphDestroy(graph);
  }
};

void expect_same_bits(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t k = 0; k < got[i].size(); ++k) {
      ASSERT_TRUE(std::isfinite(want[i][k])) << what << ": output " << i << " [" << k << "] is not finite";
      ASSERT_EQ(got[i][k], want[i][k]) << what << ": output " << i << " [" << k << "]";
    }
  }
}

TEST(CudaGraph, ALayersForwardAndBackwardCaptureAndReplayBitForBit) {
  QKV_REQUIRE_CUDA_DEVICE();
  Layer layer(ops::backend(Device::CUDA));
  layer.run();  // the first call of each op makes its plans and opts in to its shared memory, outside the capture
  const auto eager = layer.results();

  Capture capture(kc::stream());
  layer.run();
  cudaGraph_t graph = capture.end();
  size_t nodes = 0;
  kc::check_cuda(cudaGraphGetNodes(graph, nullptr, &nodes), "test", "cudaGraphGetNodes");
  EXPECT_GE(nodes, 20u) << "every op of the layer should be a node of the graph";
  cudaGraphExec_t exec = nullptr;
  kc::check_cuda(cudaGraphInstantiate(&exec, graph, 0), "test", "cudaGraphInstantiate");

  // Poisoned outputs, so that a node the replay skips shows.
  for (float* p : {layer.logits, layer.dqkv, layer.dx, layer.copied, layer.strided})
    layer.b.fill(Span{p, 1}, std::nanf(""));
  kc::check_cuda(cudaGraphLaunch(exec, kc::stream()), "test", "cudaGraphLaunch");
  expect_same_bits(layer.results(), eager, "replay");

  // New inputs at the same addresses: the replay reads them, as the eager run does.
  layer.set_inputs(2);
  layer.run();
  const auto eager2 = layer.results();
  layer.set_inputs(2);
  kc::check_cuda(cudaGraphLaunch(exec, kc::stream()), "test", "cudaGraphLaunch");
  const auto replay2 = layer.results();
  expect_same_bits(replay2, eager2, "replay with new inputs");
  EXPECT_NE(replay2[0], eager[0]) << "the new inputs should change the logits";
  cudaGraphExecDestroy(exec);
}

}  // namespace
}  // namespace qkv::cuda_graph_test
