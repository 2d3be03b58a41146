// Training a byte-level BPE from text, deterministically.
//
// The text is cut at the special tokens (which train nothing), each stretch is pre-tokenized as encoding
// does (add_prefix_space, GPT-2's pattern), and the distinct pieces are counted. Every piece starts as its
// bytes. Then, until the vocabulary has vocab_size tokens or no two symbols are adjacent any more, the
// adjacent pair with the highest count over the text (each piece weighs its number of occurrences) becomes a
// merge and a token; ties go to the pair whose left token has the lower id, then the right one's. So the
// result depends on the text alone, and ids grow in the order tokens were made.
//
// Ids: the special tokens first (0, 1, ...; also added tokens of the tokenizer.json, as Hugging Face's
// trainer does), then the 256 bytes in the order of their characters in GPT-2's alphabet ("!" first, as in
// GPT-2's vocabulary), then one per merge. A merge that spells an existing token (ab + c and a + bc) reuses
// its id.
//
// Cost: the pair counts are updated only in the pieces that hold the merged pair (a list per pair), and the
// best pair is taken from a heap whose stale entries are skipped, so a merge costs about the number of
// occurrences it changes, not a pass over the text.
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "io/bpe.h"
#include "io/bpe_pretokenize.h"
#include "qkv/error.h"

namespace qkv::bpe {
namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

struct Candidate {
  int64_t count;
  int32_t left, right;
  // The priority_queue's top is the largest: the highest count, then the lowest (left, right).
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    if (left != o.left) return left > o.left;
    return right > o.right;
  }
};

}  // namespace

Spec train(std::string_view text, int vocab_size, const TrainOptions& options) {
  check(!text.empty(), "train_bpe: text is empty: expected a training text");
  const int n_special = static_cast<int>(options.special_tokens.size());
  check(vocab_size >= n_special + 256 && vocab_size <= (1 << 24), "train_bpe: vocab_size = ", vocab_size,
        " is out of range: expected at least ", n_special + 256, " (", n_special, " special tokens + 256 bytes) and ",
        "at most 16777216");
  for (int i = 0; i < n_special; ++i) {
    const std::string& s = options.special_tokens[i];
    check(!s.empty(), "train_bpe: special_tokens[", i, "] is empty: expected the token's text");
    for (int k = 0; k < i; ++k)
      check(options.special_tokens[k] != s, "train_bpe: special_tokens[", i, "] = \"", s, "\" repeats special_tokens[",
            k, "]: expected distinct tokens");
    // A special token that is one byte's character would take that byte's token: the byte would vanish from text.
    for (int b = 0; b < 256; ++b) {
      std::string c;
      append_utf8(c, byte_to_char()[b]);
      check(s != c, "train_bpe: special_tokens[", i, "] = \"", s, "\" is the text of byte ", b,
            "'s token (byte-level BPE has one for each of the 256 bytes): expected a ", "longer text, such as <|", s,
            "|>");
    }
  }

  Spec spec;
  spec.add_prefix_space = options.add_prefix_space;
  std::vector<std::string> tokens;  // id -> text
  std::unordered_map<std::string, int32_t> ids;
  const auto add_token = [&](const std::string& t) {
    const auto [it, fresh] = ids.emplace(t, static_cast<int32_t>(tokens.size()));
    if (fresh) {
      tokens.push_back(t);
      spec.vocab.emplace_back(t, it->second);
    }
    return it->second;
  };
  for (const std::string& s : options.special_tokens)
    spec.added.push_back({add_token(s), s, true, false, false, false});
  int32_t byte_id[256];
  std::vector<int> order(256);
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [](int a, int b) { return byte_to_char()[a] < byte_to_char()[b]; });
  for (const int b : order) {
    std::string c;
    append_utf8(c, byte_to_char()[b]);
    byte_id[b] = add_token(c);
  }

  // Distinct pieces and their counts.
  std::unordered_map<std::string, int64_t> piece_counts;
  {
    std::vector<std::string_view> pieces;
    std::string stretch_buf;
    const auto count_stretch = [&](std::string_view s) {
      if (s.empty()) return;
      if (options.add_prefix_space && s[0] != ' ') {
        stretch_buf.clear();  // not `= " "`: GCC 12's false -Wrestrict warning
        stretch_buf.push_back(' ');
        stretch_buf += s;
        s = stretch_buf;
      }
      pieces.clear();
      split_gpt2(s, pieces);
      for (std::string_view p : pieces) ++piece_counts[std::string(p)];
    };
    size_t start = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t hit = 0;
      for (const std::string& s : options.special_tokens)
        if (s.size() > hit && text.compare(pos, s.size(), s) == 0) hit = s.size();
      if (!hit) {
        ++pos;
        continue;
      }
      count_stretch(text.substr(start, pos - start));
      pos += hit;
      start = pos;
    }
    count_stretch(text.substr(start));
  }
  // Pieces in byte order, so that nothing below depends on the hash map's iteration order.
  std::vector<std::pair<std::string, int64_t>> sorted(piece_counts.begin(), piece_counts.end());
  piece_counts.clear();
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> weight(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (const char c : sorted[w].first) words[w].push_back(byte_id[static_cast<unsigned char>(c)]);
    weight[w] = sorted[w].second;
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may list a word twice or stale: checked
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t k = pair_key(words[w][i], words[w][i + 1]);
      pair_count[k] += weight[w];
      pair_words[k].push_back(static_cast<int32_t>(w));
    }
  std::priority_queue<Candidate> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, int32_t(k >> 32), int32_t(k & 0xFFFFFFFFu)});

  std::vector<uint32_t> visited(words.size(), 0);
  uint32_t stamp = 0;
  while (static_cast<int>(tokens.size()) < vocab_size && !heap.empty()) {
    const Candidate best = heap.top();
    heap.pop();
    const uint64_t key = pair_key(best.left, best.right);
    const auto it = pair_count.find(key);
    if (it == pair_count.end() || it->second != best.count || best.count <= 0) continue;  // stale
    const int32_t merged = add_token(tokens[best.left] + tokens[best.right]);
    spec.merges.emplace_back(tokens[best.left], tokens[best.right]);

    ++stamp;
    std::vector<int32_t> affected = std::move(pair_words[key]);
    pair_words.erase(key);
    std::unordered_map<uint64_t, int64_t> changed;  // pair -> count delta
    for (const int32_t w : affected) {
      if (visited[w] == stamp) continue;
      visited[w] = stamp;
      std::vector<int32_t>& s = words[w];
      bool holds = false;
      for (size_t i = 0; i + 1 < s.size() && !holds; ++i) holds = s[i] == best.left && s[i + 1] == best.right;
      if (!holds) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) changed[pair_key(s[i], s[i + 1])] -= weight[w];
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.left && s[i + 1] == best.right) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = std::move(out);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t k = pair_key(s[i], s[i + 1]);
        changed[k] += weight[w];
        // Pairs with the new token are new to this word; the others list it already.
        if (s[i] == merged || s[i + 1] == merged) pair_words[k].push_back(w);
      }
    }
    // Sorted, so that the heap receives its entries in one order whatever the hash map's.
    std::vector<std::pair<uint64_t, int64_t>> deltas(changed.begin(), changed.end());
    std::sort(deltas.begin(), deltas.end());
    for (const auto& [k, d] : deltas) {
      if (d == 0) continue;
      int64_t& c = pair_count[k];
      c += d;
      if (c <= 0) {
        pair_count.erase(k);
      } else {
        heap.push({c, int32_t(k >> 32), int32_t(k & 0xFFFFFFFFu)});
      }
    }
  }
  return spec;
}

}  // namespace qkv::bpe
