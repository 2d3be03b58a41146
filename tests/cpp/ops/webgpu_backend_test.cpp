// The WebGPU executor's side of the protocol, natively: the three models on Device::WebGPU with the loopback
// (ops/webgpu_loopback.h: the commands run on the CPU executor) standing in for the GPU worker. The loopback
// runs the same CPU kernels, so logits and losses agree with a CPU twin to the last bit except where the
// stream computes differently on purpose: the Adam update (protocol.ts's formula in plain loops, not the
// vectorised kernel: 1e-6 relative over 10 steps) and the gradient norm (float partial sums added in double).
// Failures: an error in the worker and a device loss arrive as qkv::Error naming them; a model too big for the
// adapter's one buffer is refused with needed vs available; a ring far smaller than a step wraps correctly.
#include "exec/webgpu/webgpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/device_fixtures.h"
#include "ops/ops.h"
#include "ops/webgpu_loopback.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::webgpu_backend_test {
namespace {

using test::expect_near_all;
using test::ids;
using test::lm_config;
using test::seq2seq_config;

template <class M>
std::unique_ptr<M> on_webgpu(M& cpu) {
  test::webgpu_loopback();
  auto m = M::load(cpu.save());
  m->to(Device::WebGPU);
  EXPECT_EQ(m->device(), Device::WebGPU);
  return m;
}

TEST(WebGpuStream, LanguageModelFollowsTheCpu) {
  LanguageModel cpu(lm_config());
  const auto gpu = on_webgpu(cpu);
  const int B = 3, T = 11;
  const auto in = ids(B, T, 17, 5), tg = ids(B, T, 17, 6);
  EXPECT_EQ(gpu->logits(in, B, T), cpu.logits(in, B, T));
  EXPECT_EQ(gpu->attention(1), cpu.attention(1));
  const Metrics mc = cpu.evaluate(in, tg, B, T), mg = gpu->evaluate(in, tg, B, T);
  EXPECT_EQ(mg.loss, mc.loss);
  EXPECT_EQ(mg.accuracy, mc.accuracy);
  EXPECT_EQ(gpu->save(), cpu.save());  // the same weights: the same bytes, whatever the device
  for (int step = 0; step < 10; ++step) {
    const float lc = cpu.train_step(in, tg, B, T), lg = gpu->train_step(in, tg, B, T);
    EXPECT_NEAR(lg, lc, 1e-6 * lc) << "step " << step;
  }
  expect_near_all(gpu->logits(in, B, T), cpu.logits(in, B, T), 1e-5, "logits after training", "webgpu");
  const std::vector<int32_t> prompt{1, 2, 3};
  SamplingOptions greedy;
  greedy.max_new_tokens = 8;
  greedy.temperature = 0.f;
  EXPECT_EQ(gpu->generate(prompt, greedy), cpu.generate(prompt, greedy));
  greedy.use_cache = false;
  EXPECT_EQ(gpu->generate(prompt, greedy), cpu.generate(prompt, greedy));
}

TEST(WebGpuStream, Seq2SeqAndClassifierFollowTheCpu) {
  Seq2Seq cpu(seq2seq_config());
  const auto gpu = on_webgpu(cpu);
  const int B = 2, S = 9, T = 7;
  const auto src = ids(B, S, 13, 1, 2), tgt = ids(B, T, 15, 2, 1), out = ids(B, T, 15, 3, 1);
  EXPECT_EQ(gpu->logits(src, tgt, B, S, T), cpu.logits(src, tgt, B, S, T));
  for (int step = 0; step < 5; ++step) {
    const float lc = cpu.train_step(src, tgt, out, B, S, T), lg = gpu->train_step(src, tgt, out, B, S, T);
    EXPECT_NEAR(lg, lc, 1e-6 * lc) << "step " << step;
  }
  const std::vector<int32_t> one(src.begin(), src.begin() + S);
  for (int width : {1, 3}) {
    DecodeOptions o;
    o.bos = 1;
    o.eos = 2;
    o.max_len = 6;
    o.beam_width = width;
    const Decoded dg = gpu->generate(one, 1, S, o), dc = cpu.generate(one, 1, S, o);
    EXPECT_EQ(dg.tokens, dc.tokens) << "beam width " << width;
    expect_near_all(dg.scores, dc.scores, 1e-5, "beam scores", "webgpu");  // from the trained weights: Adam's 1e-6
  }

  for (Pooling pooling : {Pooling::First, Pooling::Mean}) {
    ClassifierConfig c{
        .vocab_size = 19, .context = 10, .d_model = 32, .heads = 4, .layers = 2, .d_ff = 48, .classes = 3};
    c.pooling = pooling;
    Classifier cc(c);
    const auto g = on_webgpu(cc);
    const auto x = ids(4, 10, 19, 7, 3);
    const std::vector<int32_t> labels{0, 2, 1, 2};
    EXPECT_EQ(g->logits(x, 4, 10), cc.logits(x, 4, 10));
    for (int step = 0; step < 5; ++step) {
      const float lc = cc.train_step(x, labels, 4, 10), lg = g->train_step(x, labels, 4, 10);
      EXPECT_NEAR(lg, lc, 1e-6 * lc) << "step " << step;
    }
  }
}

TEST(WebGpuStream, ARingFarSmallerThanAStepWrapsAndChunksUploads) {
  test::WebGpuLoopback small(1024);  // 4 KiB of ring: every step wraps many times; uploads come in chunks
  LanguageModel cpu(lm_config());
  auto gpu = LanguageModel::load(cpu.save());
  gpu->to(Device::WebGPU);
  const auto in = ids(2, 12, 17, 8), tg = ids(2, 12, 17, 9);
  for (int step = 0; step < 3; ++step) EXPECT_NEAR(gpu->train_step(in, tg, 2, 12), cpu.train_step(in, tg, 2, 12), 1e-5);
  EXPECT_GT(small.wraps(), 10u);
  gpu.reset();
}

TEST(WebGpuStream, AWorkerErrorAndADeviceLossBecomeErrorsNamingThem) {
  {
    test::WebGpuLoopback lb;
    LanguageModel cpu(lm_config());
    auto gpu = LanguageModel::load(cpu.save());
    gpu->to(Device::WebGPU);
    const auto in = ids(2, 8, 17, 1), tg = ids(2, 8, 17, 2);
    gpu->train_step(in, tg, 2, 8);
    lb.fail_next("GPUValidationError: binding size too small");
    const std::string m = test::message_of([&] { gpu->train_step(in, tg, 2, 8); });
    EXPECT_NE(m.find("webgpu: GPUValidationError: binding size too small"), std::string::npos) << m;
    // Nothing more runs on a failed connection; new models are refused with the reason.
    EXPECT_NE(test::message_of([&] {
                LanguageModel again(lm_config(), {}, Device::WebGPU);
              }).find("device = webgpu is unavailable: GPUValidationError"),
              std::string::npos);
    gpu.reset();  // its memory returns to the failed connection without throwing
  }
  {
    test::WebGpuLoopback lb;
    LanguageModel gpu(lm_config(), {}, Device::WebGPU);
    // A first call waits for everything queued (the model's own initialisation), so that the loss hits the
    // kernels of the call below, not those of the creation.
    gpu.logits(ids(1, 4, 17, 3), 1, 4);
    lb.fail_next("Device was destroyed.", /*lost=*/true);
    const std::string m = test::message_of([&] { gpu.logits(ids(1, 4, 17, 3), 1, 4); });
    EXPECT_NE(m.find("webgpu: the GPU device was lost: Device was destroyed."), std::string::npos) << m;
  }
}

TEST(WebGpuStream, AModelTooBigForTheAdaptersBufferIsRefusedWithNeededVsAvailable) {
  test::WebGpuLoopback lb(1 << 16, 1 << 20);  // a 1 MiB maxBufferSize
  LanguageModelConfig c = lm_config();
  c.d_model = 256;
  c.d_ff = 1024;
  const std::string m = test::message_of([&] { LanguageModel big(c, {}, Device::WebGPU); });
  EXPECT_NE(m.find("out of memory: the WebGPU arena needs "), std::string::npos) << m;
  EXPECT_NE(m.find("more than the adapter's one-buffer limit of 1048576 bytes"), std::string::npos) << m;
  // A model that fits still works on the same connection.
  LanguageModel small(lm_config(), {}, Device::WebGPU);
  EXPECT_EQ(small.logits(ids(1, 3, 17, 4), 1, 3).size(), 3u * 17);
}

}  // namespace
}  // namespace qkv::webgpu_backend_test
