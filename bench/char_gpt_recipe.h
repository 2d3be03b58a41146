#pragma once
// nanoGPT's CPU char recipe (TOOLCHAIN.md, "Data") as qkv configurations, shared by the quality benchmark
// (char_gpt.cpp) and the speed benchmark (train_bench.cpp). bench/char_gpt_torch.py is the PyTorch twin.
#include "qkv/language_model.h"
#include "qkv/optimizer.h"

namespace qkv::bench {

constexpr int kCharLayers = 4, kCharHeads = 4, kCharEmbd = 128, kCharContext = 64, kCharBatch = 12;
constexpr int kCharTotalSteps = 2000, kCharWarmup = 100;

// 4 pre-LN layers, 4 heads, n_embd 128, context 64, exact GELU, no linear biases, learned positions, tied
// head, final LayerNorm, no dropout.
inline LanguageModelConfig char_gpt_config(int vocab) {
  LanguageModelConfig c{
      .vocab_size = vocab, .context = kCharContext, .d_model = kCharEmbd, .heads = kCharHeads, .layers = kCharLayers};
  c.activation = Activation::GELU;
  c.norm = NormPosition::Pre;
  c.bias = false;
  c.positions = Positions::Learned;
  c.tie_head = true;
  c.final_norm = true;
  c.dropout = 0.f;
  return c;
}

// AdamW (0.9, 0.99), eps 1e-8, weight decay 0.1 on matrices, global-norm clip 1.0; lr 1e-3 with 100 warm-up
// steps and cosine decay to 1e-4 at step 2000.
inline OptimizerConfig char_gpt_optimizer() {
  OptimizerConfig o;
  o.kind = OptimizerKind::AdamW;
  o.lr = 1e-3f;
  o.beta1 = 0.9f;
  o.beta2 = 0.99f;
  o.eps = 1e-8f;
  o.weight_decay = 0.1f;
  o.decay_matrices_only = true;
  o.grad_clip = 1.0f;
  o.schedule = Schedule::Cosine;
  o.warmup_steps = kCharWarmup;
  o.total_steps = kCharTotalSteps;
  o.min_lr = 1e-4f;
  return o;
}

}  // namespace qkv::bench
