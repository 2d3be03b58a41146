#pragma once
// Sampling: how a language model picks its next token from a row of logits.
//
// The logits processors run in Hugging Face's order:
//   1. repetition penalty (CTRL, https://arxiv.org/abs/1909.05858): for every token already in the context,
//      a positive logit is divided by the penalty and a negative one multiplied by it;
//   2. temperature 0: the argmax (the lowest id among equal maxima), nothing is drawn;
//      otherwise p = softmax(z / temperature), in double;
//   3. top-k: keep the k most probable tokens (ties: lower id first);
//   4. top-p (nucleus, https://arxiv.org/abs/1904.09751): of what is left, keep the most probable tokens
//      until their probability mass reaches top_p (at least one token);
//   5. draw from the kept tokens, renormalised, with one uniform number u in [0, 1).
// Stop tokens and the length limit belong to the generation loop (LanguageModel::generate).
#include <cstdint>
#include <span>
#include <vector>

namespace qkv {

struct SamplingOptions {
  int max_new_tokens = 256;          // tokens to generate at most (0: none)
  float temperature = 1.f;           // 0 = greedy
  int top_k = 0;                     // 0 = off
  float top_p = 1.f;                 // in (0, 1]; 1 = off
  float repetition_penalty = 1.f;    // > 0; 1 = off, > 1 discourages repeats
  uint64_t seed = 0;                 // the generator of the uniform draws: same seed, same tokens
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  // Keep each layer's keys and values between steps (a KV cache), so that a new token costs one position's
  // work; false re-runs the whole window for every token (the same tokens, slower: for checks and benchmarks).
  bool use_cache = true;
};

// Throws qkv::Error naming the field, its value and the expected range. With vocab_size > 0 the stop
// tokens must also be ids in [0, vocab_size).
void validate(const SamplingOptions& options, int vocab_size = 0);

// The next token from one row of logits (V), a pure function of its arguments. `context` holds the tokens
// so far (for the repetition penalty); `u` in [0, 1) is the uniform draw (unused when temperature is 0).
// Throws qkv::Error on empty or non-finite logits, a context id outside [0, V), or u outside [0, 1).
int32_t sample_token(std::span<const float> logits, std::span<const int32_t> context, const SamplingOptions& options,
                     double u);

// Steps 1-4 above as a probability vector (V) that sums to 1 (for tests and for showing a distribution);
// with temperature 0 it is one-hot on the argmax.
std::vector<double> sampling_distribution(std::span<const float> logits, std::span<const int32_t> context,
                                          const SamplingOptions& options);

}  // namespace qkv
