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

// The logits (V) after the repetition penalty, in float as the model produced them: `logits` itself without one (the
// default: nothing copied for a greedy step), else a penalised copy in `buffer`. The finiteness check looks at the
// largest magnitude's bit pattern (an integer maximum, which vectorizes) and names the first offender only when there
// is one: element by element it was 2.5% of the calling thread's time in GPT-2 124M's q4a8 decode in the package.
std::span<const float> penalized(std::span<const float> logits, std::span<const int32_t> context, float penalty,
                                 std::vector<float>& buffer) {
  const int V = static_cast<int>(logits.size());
  check(V >= 1, "logits is empty: expected one row of V >= 1 values");
  uint32_t top = 0;
  for (const float x : logits) {
    uint32_t bits;  // (std::bit_cast: not in Emscripten's libc++)
    std::memcpy(&bits, &x, sizeof bits);
    top = std::max(top, bits & 0x7fffffffu);
  }
  if (top >= 0x7f800000u)  // a NaN or an infinity
    for (int v = 0; v < V; ++v)
      check(std::isfinite(logits[v]), "logits[", v, "] = ", logits[v], " is not finite: expected finite logits");
  for (size_t i = 0; i < context.size(); ++i)
    check(context[i] >= 0 && context[i] < V, "context[", i, "] = ", context[i],
          " is out of range: expected a token id in [0, ", V, ")");
  if (penalty == 1.f) return logits;
  buffer.assign(logits.begin(), logits.end());
  std::vector<uint8_t> seen(static_cast<size_t>(V), 0);
  for (const int32_t t : context) {
    if (seen[t]) continue;
    seen[t] = 1;
    buffer[t] = buffer[t] > 0.f ? buffer[t] / penalty : buffer[t] * penalty;
  }
  return buffer;
}

// The lowest id among the largest values.
int32_t argmax(std::span<const float> z) {
  return static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
}

// Unnormalised probabilities w (V) = exp((z - max) / temperature) on the tokens that top-k and top-p keep,
// 0 elsewhere; returns their sum, accumulated in id order.
double weights(std::vector<double>& w, std::span<const float> z, const SamplingOptions& o) {
  const int V = static_cast<int>(z.size());
  const double mx = *std::max_element(z.begin(), z.end());
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
  const std::span<const float> z = penalized(logits, context, o.repetition_penalty, buffer);
  if (o.temperature == 0.f) return argmax(z);
  std::vector<double> w;
  double left = u * weights(w, z, o);
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
  const std::span<const float> z = penalized(logits, context, o.repetition_penalty, buffer);
  std::vector<double> w;
  if (o.temperature == 0.f) {
    w.assign(z.size(), 0.0);
    w[argmax(z)] = 1.0;
    return w;
  }
  const double sum = weights(w, z, o);
  for (double& p : w) p /= sum;
  return w;
}

}  // namespace qkv
