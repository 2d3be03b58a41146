// Beam search (beam_search.h). Legend: B batch rows, W beams per row, V vocabulary, R = B * W decoder rows.
#include "infer/beam_search.h"

#include <algorithm>
#include <cmath>

#include "qkv/error.h"

namespace qkv::infer {

double length_penalty(int len, float alpha) { return std::pow((5.0 + len) / 6.0, static_cast<double>(alpha)); }

namespace {

struct Candidate {
  double log_prob;
  int beam, token;
};

// Best first; ties: the lower beam, then the lower token id (so width 1 picks argmax's lowest id).
bool better(const Candidate& a, const Candidate& b) {
  if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
  if (a.beam != b.beam) return a.beam < b.beam;
  return a.token < b.token;
}

std::vector<Hypothesis>::iterator worst(std::vector<Hypothesis>& fin) {
  return std::min_element(fin.begin(), fin.end(),
                          [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
}

struct Beam {
  std::vector<int32_t> tokens;
  double log_prob;
};

}  // namespace

std::vector<Hypothesis> beam_search(const BeamSearchOptions& o, const BeamStep& step) {
  check(o.batch >= 1, "beam search: batch = ", o.batch, " is invalid: expected >= 1");
  check(o.width >= 1, "beam_width = ", o.width, " is invalid: expected an integer >= 1");
  check(o.vocab >= 2, "beam search: vocab = ", o.vocab, " is invalid: expected >= 2");
  check(o.max_len >= 1, "max_len = ", o.max_len, " is invalid: expected an integer >= 1");
  check(std::isfinite(o.length_penalty) && o.length_penalty >= 0.f, "length_penalty = ", o.length_penalty,
        " is invalid: expected a finite number >= 0");
  const int W = o.width, V = o.vocab, R = o.batch * W;
  // Only the first beam of each row is live at the start: the others would repeat it.
  std::vector<Beam> beams(static_cast<size_t>(R)), next(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) beams[static_cast<size_t>(r)].log_prob = r % W == 0 ? 0.0 : -INFINITY;
  std::vector<int32_t> parents(static_cast<size_t>(R)), tokens(static_cast<size_t>(R), o.bos);
  for (int r = 0; r < R; ++r) parents[static_cast<size_t>(r)] = r;
  std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(o.batch));
  std::vector<uint8_t> done(static_cast<size_t>(o.batch), 0);
  std::vector<Candidate> cands;
  cands.reserve(static_cast<size_t>(W) * V);
  std::vector<double> lsm(static_cast<size_t>(V));

  for (int t = 1; t <= o.max_len; ++t) {
    const float* logits = step(parents, tokens);
    for (int b = 0; b < o.batch; ++b) {
      const int r0 = b * W;
      if (done[static_cast<size_t>(b)]) {  // its rows keep running (the batch moves together), unseen
        for (int k = 0; k < W; ++k) {
          parents[static_cast<size_t>(r0 + k)] = r0 + k;
          tokens[static_cast<size_t>(r0 + k)] = o.eos;
        }
        continue;
      }
      cands.clear();
      for (int k = 0; k < W; ++k) {
        const Beam& beam = beams[static_cast<size_t>(r0 + k)];
        if (beam.log_prob == -INFINITY) continue;
        // log softmax in double: z - max - log sum exp(z - max)
        const float* z = logits + static_cast<size_t>(r0 + k) * V;
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; ++v) {
          check(!std::isnan(z[v]) && z[v] != INFINITY, "beam search: the logits of row ", r0 + k, " hold ", z[v]);
          mx = std::max(mx, static_cast<double>(z[v]));
        }
        check(mx > -INFINITY, "beam search: every logit of row ", r0 + k, " is -inf");
        for (int v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
        const double lse = mx + std::log(sum);
        for (int v = 0; v < V; ++v) {
          const double lp = beam.log_prob + (z[v] - lse);
          if (lp > -INFINITY) cands.push_back({lp, k, v});
        }
      }
      const size_t top = std::min(cands.size(), static_cast<size_t>(2 * W));
      std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(top), cands.end(), better);
      int live = 0;
      std::vector<Hypothesis>& fin = finished[static_cast<size_t>(b)];
      for (size_t i = 0; i < top && live < W; ++i) {
        const Candidate& c = cands[i];
        const Beam& from = beams[static_cast<size_t>(r0 + c.beam)];
        if (c.token == o.eos) {
          if (static_cast<int>(i) >= W) continue;  // an eos outside the best W extensions is not kept
          Hypothesis h{from.tokens, c.log_prob, 0.0};
          h.tokens.push_back(o.eos);
          h.score = c.log_prob / length_penalty(t, o.length_penalty);
          fin.push_back(std::move(h));
          if (static_cast<int>(fin.size()) > W) fin.erase(worst(fin));  // keep the best W
          continue;
        }
        Beam& to = next[static_cast<size_t>(r0 + live)];
        to.tokens = from.tokens;
        to.tokens.push_back(c.token);
        to.log_prob = c.log_prob;
        parents[static_cast<size_t>(r0 + live)] = r0 + c.beam;
        tokens[static_cast<size_t>(r0 + live)] = c.token;
        ++live;
      }
      for (int k = live; k < W; ++k) {  // fewer extensions than beams: the rest stay dead
        next[static_cast<size_t>(r0 + k)] = {{}, -INFINITY};
        parents[static_cast<size_t>(r0 + k)] = r0;
        tokens[static_cast<size_t>(r0 + k)] = o.eos;
      }
      // Done when no live beam, even scored at this length, would enter the best W finished.
      const bool full = static_cast<int>(fin.size()) >= W;
      if (live == 0 ||
          (full && worst(fin)->score >= next[static_cast<size_t>(r0)].log_prob / length_penalty(t, o.length_penalty))) {
        done[static_cast<size_t>(b)] = 1;
      } else if (t == o.max_len) {  // out of length: the live beams compete as they are
        for (int k = 0; k < live; ++k) {
          const Beam& beam = next[static_cast<size_t>(r0 + k)];
          fin.push_back({beam.tokens, beam.log_prob, beam.log_prob / length_penalty(t, o.length_penalty)});
        }
        done[static_cast<size_t>(b)] = 1;
      }
      for (int k = 0; k < W; ++k) std::swap(beams[static_cast<size_t>(r0 + k)], next[static_cast<size_t>(r0 + k)]);
    }
    if (std::all_of(done.begin(), done.end(), [](uint8_t d) { return d != 0; })) break;
  }

  std::vector<Hypothesis> best(static_cast<size_t>(o.batch));
  for (int b = 0; b < o.batch; ++b) {
    const std::vector<Hypothesis>& fin = finished[static_cast<size_t>(b)];
    // Every row ends done, and a done row has at least one finished hypothesis: it stopped with W of them,
    // with its live beams at max_len, or with no live beam left, which needs an eos among its extensions.
    const auto it = std::max_element(fin.begin(), fin.end(),
                                     [](const Hypothesis& a, const Hypothesis& h) { return a.score < h.score; });
    if (it != fin.end()) best[static_cast<size_t>(b)] = *it;
  }
  return best;
}

}  // namespace qkv::infer
