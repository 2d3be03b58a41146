// The three models on each device through the op boundary (ops/ops.h), judged against the CPU:
//   - a model asked for CUDA where there is none is refused with the reason, and a model whose move fails stays
//     where it was, whole (these run everywhere);
//   - on a GPU (skipped without one, naming why): the same checkpoint gives the same logits within 1e-5
//     (fp32), 50 training steps follow the CPU's losses within 1e-4 relative (no dropout), greedy generation
//     and beam search give the same tokens, a checkpoint saved on the GPU is the same bytes as the CPU's, and
//     bad input is refused before anything is launched, leaving the model usable.
// The PyTorch parity cases run on CUDA too (parity/models_parity_test.cpp, ParityModelsCuda).
#include "qkv/device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/device_fixtures.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::models_device_test {
namespace {

using test::classifier_config;
using test::expect_near_all;
using test::expect_near_scaled;
using test::ids;
using test::kLogitTol;
using test::kLossTol;
using test::lm_config;
using test::seq2seq_config;

// ---- Everywhere: refusals ----

TEST(ModelDevice, CudaWithoutAGpuIsRefusedWithTheReasonAndTheModelStaysOnTheCpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: the refusal cannot be seen here";
  const std::string why = cuda_unavailable_reason();
  ASSERT_FALSE(why.empty());
  for (const std::string& m :
       {test::message_of([] { LanguageModel lm(lm_config(), {}, Device::CUDA); }),
        test::message_of([] { Seq2Seq s(seq2seq_config(), {}, Device::CUDA); }),
        test::message_of([] { Classifier c(classifier_config(Pooling::Mean), {}, Device::CUDA); })})
    EXPECT_NE(m.find("device = cuda is unavailable: " + why), std::string::npos) << m;

  // A failed move changes nothing: the model trains on exactly as its twin that was never asked to move.
  LanguageModel lm(lm_config()), twin(lm_config());
  const auto in = ids(2, 8, 17, 1), tg = ids(2, 8, 17, 2);
  EXPECT_NE(test::message_of([&] { lm.to(Device::CUDA); }).find(why), std::string::npos);
  EXPECT_EQ(lm.device(), Device::CPU);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(lm.train_step(in, tg, 2, 8), twin.train_step(in, tg, 2, 8)) << "step " << s;
}

TEST(ModelDevice, Tf32WithoutAGpuIsRefusedWithTheReason) {
  if (cuda_built()) GTEST_SKIP() << "this build has CUDA: set_cuda_tf32 only sets the products' mode";
  EXPECT_NE(test::message_of([] { set_cuda_tf32(true); }).find(cuda_unavailable_reason()), std::string::npos);
  set_cuda_tf32(false);  // a no-op, not an error
  EXPECT_FALSE(cuda_tf32());
  const std::string bf16 = test::message_of([] { set_cuda_precision(CudaPrecision::BF16); });
  EXPECT_NE(bf16.find("set_cuda_precision(bf16)"), std::string::npos) << bf16;
  EXPECT_NE(bf16.find(cuda_unavailable_reason()), std::string::npos) << bf16;
  set_cuda_precision(CudaPrecision::FP32);
  EXPECT_EQ(cuda_precision(), CudaPrecision::FP32);
}

// The precision's names, both ways; a wrong one is refused naming the argument, the value and the choices.
TEST(ModelDevice, PrecisionNamesParseAndAWrongOneIsNamed) {
  for (CudaPrecision p : {CudaPrecision::FP32, CudaPrecision::TF32, CudaPrecision::BF16})
    EXPECT_EQ(parse_cuda_precision(to_string(p), "--precision"), p);
  EXPECT_STREQ(to_string(CudaPrecision::BF16), "bf16");
  for (const char* bad : {"fp16", "BF16", "", "tf32 "}) {
    const std::string m = test::message_of([&] { parse_cuda_precision(bad, "--precision"); });
    EXPECT_NE(m.find(std::string("--precision = \"") + bad + "\": expected fp32, tf32 or bf16"), std::string::npos)
        << m;
  }
}

TEST(ModelDevice, ToTheDeviceItIsOnChangesNothing) {
  LanguageModel lm(lm_config()), twin(lm_config());
  const auto in = ids(2, 8, 17, 3), tg = ids(2, 8, 17, 4);
  lm.train_step(in, tg, 2, 8);
  twin.train_step(in, tg, 2, 8);
  lm.to(Device::CPU);
  EXPECT_EQ(lm.device(), Device::CPU);
  EXPECT_EQ(lm.logits(in, 2, 8), twin.logits(in, 2, 8));
  EXPECT_EQ(lm.save(), twin.save());
}

// ---- On a GPU ----

// The same weights on both devices: a CPU model, and its checkpoint loaded and moved to CUDA.
template <class Model>
std::unique_ptr<Model> on_cuda(Model& cpu) {
  auto m = Model::load(cpu.save());
  m->to(Device::CUDA);
  EXPECT_EQ(m->device(), Device::CUDA);
  return m;
}

TEST(ModelDeviceCuda, LanguageModelLogitsTrainingAndGenerationFollowTheCpu) {
  QKV_SKIP_WITHOUT_CUDA();
  LanguageModel cpu(lm_config());
  const auto start = cpu.save();
  const auto gpu = on_cuda(cpu);
  const int B = 3, T = 11;
  const auto in = ids(B, T, 17, 5), tg = ids(B, T, 17, 6);
  expect_near_all(gpu->logits(in, B, T), cpu.logits(in, B, T), kLogitTol, "lm logits");
  expect_near_all(gpu->attention(1), cpu.attention(1), kLogitTol, "lm attention weights");
  const Metrics mc = cpu.evaluate(in, tg, B, T), mg = gpu->evaluate(in, tg, B, T);
  EXPECT_NEAR(mg.loss, mc.loss, kLogitTol * mc.loss);
  EXPECT_EQ(mg.accuracy, mc.accuracy);
  for (int s = 0; s < 50; ++s) {
    const float lc = cpu.train_step(in, tg, B, T), lg = gpu->train_step(in, tg, B, T);
    ASSERT_LE(std::abs(lg - lc) / std::abs(lc), kLossTol) << "step " << s << ": cuda " << lg << ", cpu " << lc;
  }
  // Gradient accumulation: two halves with weight 1/2, then one step, from the first checkpoint on both devices.
  // Not after the 50 steps: Adam turns each device's rounding of near-zero gradients into steps of lr, and the two
  // trajectories part by float32 chaos alone (the CPU against itself with every starting weight moved by one ulp:
  // logits 1e-7 apart after 30 steps, 1.6e-4 after 50, 2.0e-4 after this step; on an H200 the GPU was 1.5e-4).
  const auto in1 = ids(2, T, 17, 7), tg1 = ids(2, T, 17, 8);
  const auto cpu_a = LanguageModel::load(start);
  const auto gpu_a = on_cuda(*cpu_a);
  for (LanguageModel* m : {cpu_a.get(), gpu_a.get()}) {
    m->zero_grad();
    m->accumulate(in1, tg1, 2, T, 0.5f);
    m->accumulate(in, tg, B, T, 0.5f);
    m->apply_gradients();
  }
  expect_near_all(gpu_a->logits(in, B, T), cpu_a->logits(in, B, T), 1e-4, "lm logits after accumulation");
  // Greedy generation with the KV cache, and without it: the same tokens as the CPU.
  SamplingOptions o;
  o.max_new_tokens = 20;
  o.temperature = 0.f;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  for (bool cache : {true, false}) {
    o.use_cache = cache;
    EXPECT_EQ(gpu->generate(prompt, o), cpu.generate(prompt, o)) << "use_cache " << cache;
  }
  // Back on the CPU, the GPU's training is in the weights: its own logits, up to the two executors' rounding.
  const auto on_gpu = gpu->logits(in, B, T);
  gpu->to(Device::CPU);
  expect_near_all(gpu->logits(in, B, T), on_gpu, kLogitTol, "lm logits after the trip back", "back on the cpu");
}

TEST(ModelDeviceCuda, Seq2SeqLogitsTrainingAndBeamSearchFollowTheCpu) {
  QKV_SKIP_WITHOUT_CUDA();
  Seq2Seq cpu(seq2seq_config());
  const auto gpu = on_cuda(cpu);
  const int B = 4, S = 9, T = 7;
  const auto src = ids(B, S, 13, 9, 3), tin = ids(B, T, 15, 10, 2), tout = ids(B, T, 15, 11, 2);
  expect_near_all(gpu->logits(src, tin, B, S, T), cpu.logits(src, tin, B, S, T), kLogitTol, "seq2seq logits");
  expect_near_all(gpu->attention(AttentionKind::Cross, 1), cpu.attention(AttentionKind::Cross, 1), kLogitTol,
                  "cross-attention weights");
  for (int s = 0; s < 50; ++s) {
    const float lc = cpu.train_step(src, tin, tout, B, S, T), lg = gpu->train_step(src, tin, tout, B, S, T);
    ASSERT_LE(std::abs(lg - lc) / std::abs(lc), kLossTol) << "step " << s << ": cuda " << lg << ", cpu " << lc;
  }
  for (int beam : {1, 3})
    for (bool cache : {true, false}) {
      DecodeOptions o;
      o.bos = 1;
      o.eos = 2;
      o.max_len = 8;
      o.beam_width = beam;
      o.use_cache = cache;
      const Decoded dc = cpu.generate(src, B, S, o), dg = gpu->generate(src, B, S, o);
      EXPECT_EQ(dg.tokens, dc.tokens) << "beam " << beam << " use_cache " << cache;
      EXPECT_EQ(dg.lengths, dc.lengths);
    }
}

TEST(ModelDeviceCuda, ClassifierLogitsAndTrainingFollowTheCpuWithBothPoolings) {
  QKV_SKIP_WITHOUT_CUDA();
  for (Pooling pooling : {Pooling::First, Pooling::Mean}) {
    SCOPED_TRACE(pooling == Pooling::First ? "first" : "mean");
    Classifier cpu(classifier_config(pooling));
    const auto gpu = on_cuda(cpu);
    const int B = 5, T = 10;
    const auto tok = ids(B, T, 19, 12, 4);
    const std::vector<int32_t> labels = {0, 2, 1, 1, 0};
    expect_near_all(gpu->logits(tok, B, T), cpu.logits(tok, B, T), kLogitTol, "classifier logits");
    for (int s = 0; s < 50; ++s) {
      const float lc = cpu.train_step(tok, labels, B, T), lg = gpu->train_step(tok, labels, B, T);
      ASSERT_LE(std::abs(lg - lc) / std::abs(lc), kLossTol) << "step " << s << ": cuda " << lg << ", cpu " << lc;
    }
  }
}

// TF32 (set_cuda_tf32): the products' inputs keep 10 of fp32's 23 mantissa bits, so each product carries up to
// about 2^-10 (1e-3) of sum |a||b| (kernels/cuda/cuda_kernels.h: kGemmTf32Tolerance = 2e-3 of that scale). Through
// two layers (LayerNorm renormalises between them) and the head, that is at most about 1e-2 of the logits'
// scale; 50 steps of training at lr 1e-3 stay within 1e-2 of the fp32 losses. Tighter bounds would test the
// rounding, not the model.
TEST(ModelDeviceCuda, LanguageModelInTf32StaysWithinItsTolerance) {
  QKV_SKIP_WITHOUT_CUDA();
  constexpr double kTf32Tol = 1e-2;
  LanguageModel cpu(lm_config());
  const auto gpu = on_cuda(cpu);
  set_cuda_tf32(true);
  const int B = 3, T = 11;
  const auto in = ids(B, T, 17, 18), tg = ids(B, T, 17, 19);
  expect_near_scaled(gpu->logits(in, B, T), cpu.logits(in, B, T), kTf32Tol, "lm logits in tf32");
  for (int s = 0; s < 50; ++s) {
    const float lc = cpu.train_step(in, tg, B, T), lg = gpu->train_step(in, tg, B, T);
    EXPECT_LE(std::abs(lg - lc) / std::abs(lc), kTf32Tol) << "step " << s << ": cuda tf32 " << lg << ", cpu " << lc;
  }
  set_cuda_tf32(false);
  EXPECT_FALSE(cuda_tf32());
}

// BF16 (set_cuda_precision): the products' inputs keep 8 significant bits, 3 fewer than TF32's, so each product
// carries up to 8x TF32's error (kGemmBf16Tolerance = 8 kGemmTf32Tolerance); the logits and 50 steps of losses
// stay within 8x the TF32 test's bound (8e-2); attention runs its bf16 tiles (kAttentionBf16Tolerance, the same 8x).
// The parameters the optimizer updates stay fp32, and so does the checkpoint: the GPU model's save() after the
// steps has the CPU's layout and size, and the same model loaded back on the CPU gives logits within the same
// bound of the GPU's.
TEST(ModelDeviceCuda, LanguageModelInBf16StaysWithinItsTolerance) {
  QKV_SKIP_WITHOUT_CUDA();
  constexpr double kBf16Tol = 8e-2;
  LanguageModel cpu(lm_config());
  const auto gpu = on_cuda(cpu);
  set_cuda_precision(CudaPrecision::BF16);
  EXPECT_EQ(cuda_precision(), CudaPrecision::BF16);
  EXPECT_FALSE(cuda_tf32());
  const int B = 3, T = 11;
  const auto in = ids(B, T, 17, 18), tg = ids(B, T, 17, 19);
  expect_near_scaled(gpu->logits(in, B, T), cpu.logits(in, B, T), kBf16Tol, "lm logits in bf16");
  for (int s = 0; s < 50; ++s) {
    const float lc = cpu.train_step(in, tg, B, T), lg = gpu->train_step(in, tg, B, T);
    EXPECT_LE(std::abs(lg - lc) / std::abs(lc), kBf16Tol) << "step " << s << ": cuda bf16 " << lg << ", cpu " << lc;
  }
  const auto saved = gpu->save();
  EXPECT_EQ(saved.size(), cpu.save().size());
  LanguageModel back(lm_config());
  back.load_state(saved);
  expect_near_scaled(back.logits(in, B, T), gpu->logits(in, B, T), kBf16Tol, "bf16-trained weights on the cpu");
  set_cuda_precision(CudaPrecision::FP32);
  EXPECT_EQ(cuda_precision(), CudaPrecision::FP32);
}

TEST(ModelDeviceCuda, ACheckpointSavedOnTheGpuIsTheCpusBytes) {
  QKV_SKIP_WITHOUT_CUDA();
  LanguageModel cpu(lm_config());
  cpu.train_step(ids(2, 8, 17, 13), ids(2, 8, 17, 14), 2, 8);  // moments that are not zero
  const auto gpu = on_cuda(cpu);
  EXPECT_EQ(gpu->save(), cpu.save());
  EXPECT_EQ(gpu->save(false), cpu.save(false));
}

TEST(ModelDeviceCuda, BadInputIsRefusedBeforeAnyLaunchAndTheModelStaysUsable) {
  QKV_SKIP_WITHOUT_CUDA();
  LanguageModel cpu(lm_config());
  const auto gpu = on_cuda(cpu);
  auto bad = ids(2, 8, 17, 15);
  bad[5] = 17;
  const auto tg = ids(2, 8, 17, 16);
  EXPECT_NE(test::message_of([&] { gpu->train_step(bad, tg, 2, 8); }).find("inputs[5] = 17 is out of range"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] { gpu->logits(ids(2, 13, 17, 1), 2, 13); }).find("seq = 13 is invalid"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] { (void)gpu->parameters(); }).find("call to(Device::CPU) first"), std::string::npos);
  const auto in = ids(2, 8, 17, 17);
  const float lc = cpu.train_step(in, tg, 2, 8), lg = gpu->train_step(in, tg, 2, 8);
  EXPECT_LE(std::abs(lg - lc) / std::abs(lc), kLossTol);
}

}  // namespace
}  // namespace qkv::models_device_test
