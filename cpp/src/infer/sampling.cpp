// Sampling: repetition penalty, temperature, top-k, top-p and the draw (qkv/sampling.h).
// Legend: V vocabulary.
// reference: https://huggingface.co/docs/transformers/main_classes/text_generation (the logits processors)
#include "qkv/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "qkv/error.h"

namespace qkv {
namespace {

// The largest of the logits, and whether all of them are finite, in one pass that the compiler vectorizes: each
// float's bits as an integer key of the same order (x >= 0: its bits; x < 0: its bits with the magnitude flipped, so
// that -0 sorts just below +0) and the largest magnitude's bits (a NaN or an infinity has them all set in the
// exponent), both integer maxima. With std::max_element (element by element, after a pass for the finiteness) the
// greedy pick of GPT-2's decode in the package took 196 us a token, 6% of a q4a8 token, on the calling thread while
// the workers wait; 13 us this way (greedy: the largest value, then argmax's search for it).
struct Extent {
  float max;
  bool finite;
};
Extent extent(std::span<const float> z) {
  int32_t key = INT32_MIN;
  uint32_t magnitude = 0;
  for (const float x : z) {
    int32_t bits;  // (std::bit_cast: not in Emscripten's libc++)
    std::memcpy(&bits, &x, sizeof bits);
    magnitude = std::max(magnitude, static_cast<uint32_t>(bits) & 0x7fffffffu);
    key = std::max(key, bits ^ ((bits >> 31) & 0x7fffffff));
  }
  const int32_t bits = key ^ ((key >> 31) & 0x7fffffff);
  float max;
  std::memcpy(&max, &bits, sizeof max);
  return {max, magnitude < 0x7f800000u};
}

// The logits (V) after the repetition penalty, in float as the model produced them: `logits` itself without one (the
// default: nothing copied for a greedy step), else a penalised copy in `buffer`; `max` receives their largest value.
// A non-finite logit is named (the first one) only when extent() found one.
std::span<const float> penalized(std::span<const float> logits, std::span<const int32_t> context, float penalty,
                                 std::vector<float>& buffer, float& max) {
  const int V = static_cast<int>(logits.size());
  check(V >= 1, "logits is empty: expected one row of V >= 1 values");
  const Extent e = extent(logits);
  if (!e.finite)
    for (int v = 0; v < V; ++v)
      check(std::isfinite(logits[v]), "logits[", v, "] = ", logits[v], " is not finite: expected finite logits");
  for (size_t i = 0; i < context.size(); ++i)
    check(context[i] >= 0 && context[i] < V, "context[", i, "] = ", context[i],
          " is out of range: expected a token id in [0, ", V, ")");
  max = e.max;
  if (penalty == 1.f) return logits;
  buffer.assign(logits.begin(), logits.end());
  std::vector<uint8_t> seen(static_cast<size_t>(V), 0);
  for (const int32_t t : context) {
    if (seen[t]) continue;
    seen[t] = 1;
    buffer[t] = buffer[t] > 0.f ? buffer[t] / penalty : buffer[t] * penalty;
  }
  max = extent(buffer).max;
  return buffer;
}

// The lowest id among the largest values (std::max_element's answer; -0 and +0 are equal), given the largest value:
// blocks of 64 compared without a branch (vectorized), then the first block that holds it element by element.
int32_t argmax(std::span<const float> z, float max) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= z.size(); i += kBlock) {
    bool found = false;
    for (size_t j = 0; j < kBlock; ++j) found |= z[i + j] == max;
    if (found) break;
  }
  for (; i < z.size(); ++i)
    if (z[i] == max) break;
  return static_cast<int32_t>(i);
}

// Unnormalised probabilities w (V) = exp((z - max) / temperature) on the tokens that top-k and top-p keep,
// 0 elsewhere; returns their sum, accumulated in id order.
double weights(std::vector<double>& w, std::span<const float> z, float max, const SamplingOptions& o) {
  const int V = static_cast<int>(z.size());
  const double mx = max;
  w.resize(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) w[v] = std::exp((z[v] - mx) / o.temperature);
  // Rank: most probable first, the lower id first among equals.
  const auto more_probable = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  std::vector<int32_t> order;
  if (o.top_k > 0 && o.top_k < V) {
    order.resize(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + o.top_k, order.end(), more_probable);
    for (auto it = order.begin() + o.top_k; it != order.end(); ++it) w[*it] = 0.0;
    order.resize(static_cast<size_t>(o.top_k));
  }
  if (o.top_p < 1.f) {
    if (order.empty()) {
      order.resize(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
    }
    std::sort(order.begin(), order.end(), more_probable);
    double kept = 0.0;
    for (int32_t v : order) kept += w[v];
    // Keep the most probable tokens until their share of the mass reaches top_p.
    const double target = static_cast<double>(o.top_p) * kept;
    double mass = 0.0;
    size_t n = 0;
    while (n < order.size() && (n == 0 || mass < target)) mass += w[order[n++]];
    for (size_t i = n; i < order.size(); ++i) w[order[i]] = 0.0;
  }
  double sum = 0.0;
  for (int v = 0; v < V; ++v) sum += w[v];
  return sum;
}

}  // namespace

void validate(const SamplingOptions& o, int vocab_size) {
  check(o.max_new_tokens >= 0, "max_new_tokens = ", o.max_new_tokens, " is invalid: expected an integer >= 0");
  check(std::isfinite(o.temperature) && o.temperature >= 0.f, "temperature = ", o.temperature,
        " is invalid: expected a finite number >= 0 (0 = greedy)");
  check(o.top_k >= 0, "top_k = ", o.top_k, " is invalid: expected an integer >= 0 (0 = off)");
  check(o.top_p > 0.f && o.top_p <= 1.f, "top_p = ", o.top_p, " is invalid: expected 0 < top_p <= 1 (1 = off)");
  check(std::isfinite(o.repetition_penalty) && o.repetition_penalty > 0.f,
        "repetition_penalty = ", o.repetition_penalty, " is invalid: expected a finite number > 0 (1 = off)");
  if (vocab_size > 0)
    for (size_t i = 0; i < o.stop_tokens.size(); ++i)
      check(o.stop_tokens[i] >= 0 && o.stop_tokens[i] < vocab_size, "stop_tokens[", i, "] = ", o.stop_tokens[i],
            " is out of range: expected a token id in [0, ", vocab_size, ")");
}

int32_t sample_token(std::span<const float> logits, std::span<const int32_t> context, const SamplingOptions& o,
                     double u) {
  validate(o);
  check(u >= 0.0 && u < 1.0, "u = ", u, " is invalid: expected a uniform draw in [0, 1)");
  std::vector<float> buffer;
  float max = 0.f;
  const std::span<const float> z = penalized(logits, context, o.repetition_penalty, buffer, max);
  if (o.temperature == 0.f) return argmax(z, max);
  std::vector<double> w;
  double left = u * weights(w, z, max, o);
  // Walk the cumulative mass; rounding can leave a sliver at the end: that goes to the last kept token.
  int32_t last = 0;
  for (size_t v = 0; v < w.size(); ++v) {
    if (w[v] == 0.0) continue;
    if ((left -= w[v]) < 0.0) return static_cast<int32_t>(v);
    last = static_cast<int32_t>(v);
  }
  return last;
}

std::vector<double> sampling_distribution(std::span<const float> logits, std::span<const int32_t> context,
                                          const SamplingOptions& o) {
  validate(o);
  std::vector<float> buffer;
  float max = 0.f;
  const std::span<const float> z = penalized(logits, context, o.repetition_penalty, buffer, max);
  std::vector<double> w;
  if (o.temperature == 0.f) {
    w.assign(z.size(), 0.0);
    w[argmax(z, max)] = 1.0;
    return w;
  }
  const double sum = weights(w, z, max, o);
  for (double& p : w) p /= sum;
  return w;
}

}  // namespace qkv
