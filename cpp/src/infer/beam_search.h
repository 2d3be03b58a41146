#pragma once
// Beam search over a decoder seen as a step function, for Seq2Seq::generate (and its tests, which drive it
// with a hand-made table of next-token probabilities).
//
// Each batch row keeps `width` live hypotheses (beams) with their log-probabilities. A step scores every
// beam's extensions, log P(prefix) + log softmax(logits)[v], and walks the best 2 * width of them in order
// (ties: the lower beam, then the lower token id): an extension by eos among the first `width` finishes a
// hypothesis, scored log P / lp(len) with GNMT's length penalty lp(len) = ((5 + len) / 6)^alpha
// (https://arxiv.org/abs/1609.08144; alpha = 0.6 in "Attention Is All You Need"; len counts the generated
// tokens, eos included); the others become the next live beams until there are `width` of them. A row keeps
// its best `width` finished hypotheses and stops (Hugging Face's default early stopping) once it has
// `width` of them and the worst scores at least the best live beam's log P / lp(t) at the current length
// t; or at max_len, where its live beams join the finished ones as they are. Its result is the best-scoring
// finished hypothesis. With width 1 this is greedy decoding exactly: an eos ranked first ends the search
// (the live beam, second, cannot score more at the same length), and an eos ranked second is not kept.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace qkv::infer {

struct BeamSearchOptions {
  int batch = 1, width = 1, vocab = 0, max_len = 0, bos = 0, eos = 0;
  float length_penalty = 0.6f;  // alpha; 0 ranks by log P alone
};

// The decoder: rows = batch * width, row b * width + k is beam k of batch row b. Before computing, the
// decoder's state of row r becomes what row parents[r] had (the hypothesis it extends), then tokens[r] is
// appended to it. Returns the next-token logits (rows, vocab), valid until the next call. The first call
// has parents[r] = r and tokens = bos.
using BeamStep = std::function<const float*(std::span<const int32_t> parents, std::span<const int32_t> tokens)>;

struct Hypothesis {
  std::vector<int32_t> tokens;  // generated, eos included when it finished
  double log_prob = 0;
  double score = 0;  // log_prob / lp(tokens.size())
};

// The best hypothesis of each batch row.
std::vector<Hypothesis> beam_search(const BeamSearchOptions& options, const BeamStep& step);

double length_penalty(int len, float alpha);

}  // namespace qkv::infer
