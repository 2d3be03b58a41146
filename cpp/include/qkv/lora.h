#pragma once
// LoRA adapters (Hu et al. 2021, as PEFT implements them): low-rank updates trained on a frozen base.
// For every targeted Linear, y = x W^T + b + (alpha / rank) * dropout(x) A^T B^T, A (rank, in), B (out, rank).
// Model::add_lora (qkv/model.h) adds them; training then updates A and B only.
//
// Targets, by the names the CLI, JS and checkpoints use (the Linear roles of a model):
//   "q", "k", "v"   rows 0..C, C..2C, 2C..3C of attention's in_proj_weight, one adapter each (out-size C)
//   "qkv"           in_proj_weight whole, ONE adapter of out-size 3C (GPT-2's c_attn as PEFT adapts it)
//   "out"           attention's out_proj
//   "up", "down"    the feed-forward's linear1 (C -> F) and linear2 (F -> C)
//   "head"          the output projection: a language model's lm_head (or, tied, the token embedding used as the
//                   head: the adapter adapts the head product only, not the embedding lookup), the classifier's
//                   final layer(s) (every Linear of its head), seq2seq's generator
// Every attention module gets the attention targets (seq2seq: encoder self, decoder self and cross attention).
// "q"/"k"/"v" together with "qkv" is refused (they overlap).
//
// Initial values (what a PyTorch reference reproduces): B = 0. A is drawn on the host by qkv's Rng (runtime/random.h,
// the generator nn::Parameters uses for the base) seeded with LoraOptions::seed, the adapters in the order
// Model::lora_parameters() lists them, each A's rank * in values row-major, each
// U(-1/sqrt(in), 1/sqrt(in)) = kaiming_uniform_(A, a = sqrt(5)) as torch.nn.Linear and PEFT initialise lora_A:
// value = float((2 u - 1) * (1 / sqrt(in))) computed in double, u = Rng::uniform() in [0, 1). (A reference reads A
// from the model rather than drawing it: the exact draws are qkv's own, not torch's.) The model's optimizer settings
// apply to the adapters; AdamW's weight decay applies to A and B (2-D tensors, as to every 2-D weight).
//
// Dropout on the adapter's input (PEFT's lora_dropout), in training passes only (the training calls in training
// mode; Model::set_training(false), evaluate, logits and generation draw none), whatever the model's own dropout:
// inverted dropout with the counter-based mask every executor draws alike (ops/dropout_hash.h, kernels.h):
//   element e (row-major over the adapter's input x (rows, in)) is kept iff dropout_hash(S, e) >= p * 2^32
//   (ops::dropout_threshold), kept elements scaled by 1 / (1 - p), p = LoraOptions::dropout;
//   S = nn::Dropout::seed_for(stream) = (uint64(dropout_hash(s, stream)) << 32) ^ (s + stream);
//   s = the pass's seed, model_seed * 0x9E3779B97F4A7C15 + passes (ModelCore::next_dropout; passes counts the
//       model's forward passes, training or not, from 1; the config's seed is model_seed);
//   stream = 0x4C6F524100000000 + i ("LoRA" in the high word, apart from every base module's stream, which count
//       from 1), i the adapter's index in lora_parameters() order (A and B one adapter, from 0).
// The backward recomputes the same mask. A training call runs one forward pass (seq2seq: encoder and decoder in
// one pass, the same s). The "qkv" adapter is applied to attention's query input (B rows 0..C) and to its
// key/value input (B rows C..3C), each with its own mask drawn as above over that input (the same S): in
// self-attention the two inputs are the same rows, so the two masks are the same.
#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

// The largest rank (2^20): far past any adapter's use, and the bound every reader of "qkv.lora" and of PEFT's
// adapter_config.json checks, so that whatever add_lora takes saves into a file that loads back.
inline constexpr int kMaxLoraRank = 1 << 20;

struct LoraOptions {
  int rank = 8;                                       // 1 <= r <= kMaxLoraRank
  float alpha = 16.f;                                 // scale = alpha / rank; alpha > 0 (finite)
  float dropout = 0.f;                                // on the adapter's input only, in [0, 1)
  std::vector<std::string> targets = {"qkv", "out"};  // each at most once, at least one
  uint64_t seed = 0;                                  // A's draws (above); B = 0
};

// Parses "rank=8,alpha=16,dropout=0.05,targets=qkv+out+up+down,seed=0" (targets joined with '+'; keys in any
// order, each optional: LoraOptions' defaults): the CLI's --lora. qkv::Error naming the key or value on bad input.
// The options are validated as Model::add_lora validates them, except against a model (a target it lacks).
LoraOptions lora_options_from_string(const std::string& spec);
// The canonical string of `o`, which lora_options_from_string reads back to the same options:
// "rank=8,alpha=16,dropout=0,targets=qkv+out,seed=0" (floats in the shortest form that round-trips).
std::string to_string(const LoraOptions& o);

}  // namespace qkv
