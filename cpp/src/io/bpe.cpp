// Byte-level BPE: building the tables from a Spec, encode and decode. See bpe.h.
#include "io/bpe.h"

#include <algorithm>
#include <queue>

#include "io/bpe_pretokenize.h"
#include "io/bpe_unicode.h"
#include "qkv/error.h"

namespace qkv::bpe {

// (left id, right id) -> (rank, merged id), open addressing with linear probing at most half full: the
// merge loop's one lookup per adjacent pair is the encoder's hot spot, and a std::unordered_map node walk
// costs several times this.
struct Bpe::PairTable {
  struct Slot {
    uint64_t key = ~uint64_t{0};  // left << 32 | right; all ones = empty (ids are < 2^31)
    int32_t rank = 0;
    int32_t merged = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit PairTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key_of(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static uint64_t hash(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) >> 29; }
  // A pair listed twice keeps its later rank: both reference implementations build their rank map by
  // inserting the merges in order, the later entry replacing the earlier.
  void insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k || slots[i].key == ~uint64_t{0}) {
        slots[i] = {k, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == ~uint64_t{0}) return nullptr;
    }
  }
};

namespace {

// The bytes a token's text stands for: each character's byte in GPT-2's alphabet; a token with a character
// outside the alphabet stands for its own UTF-8 (the Rust crate's ByteLevel decoder does this).
std::string token_bytes(const std::string& text, bool* in_alphabet = nullptr) {
  std::string out;
  if (in_alphabet) *in_alphabet = false;
  for (size_t pos = 0; pos < text.size();) {
    size_t len;
    const char32_t cp = decode_utf8(text, pos, len);
    const int b = len ? char_to_byte(cp) : -1;
    if (b < 0) return text;
    out.push_back(static_cast<char>(b));
    pos += len;
  }
  if (in_alphabet) *in_alphabet = true;
  return out;
}

bool in_alphabet(const std::string& text) {
  bool ok;
  token_bytes(text, &ok);
  return ok;
}

bool is_js_space(std::string_view s, size_t pos, size_t& len) {
  const char32_t cp = decode_utf8(s, pos, len);
  return len > 0 && char_class(cp) == CharClass::Space;
}

// The offset where trailing whitespace of s[begin, end) starts (JavaScript's trimEnd).
size_t trim_end(std::string_view s, size_t begin, size_t end) {
  size_t keep = begin;  // end of the last non-space character
  for (size_t pos = begin, len; pos < end; pos += len)
    if (!is_js_space(s, pos, len)) keep = pos + len;
  return keep;
}

}  // namespace

Bpe::Bpe(Spec spec) : spec_(std::move(spec)) {
  // Ids: the model vocabulary, then the added tokens over it.
  // The ids must cover 0..n-1, so n is at most the number of entries: checked before anything is sized by
  // an id (a file claiming id 10^9 for one token must not allocate a billion slots).
  int32_t n = 0;
  const size_t entries = spec_.vocab.size() + spec_.added.size();
  for (const auto& [text, id] : spec_.vocab) {
    check(id >= 0 && static_cast<size_t>(id) < entries, "tokenizer.json: field \"model.vocab\": token \"", text,
          "\" has id ", id, ": expected an id below ", entries, " (the ids must cover 0..size-1 with no gap)");
    n = std::max(n, id + 1);
  }
  for (const AddedToken& a : spec_.added) {
    check(a.id >= 0 && static_cast<size_t>(a.id) < entries, "tokenizer.json: field \"added_tokens\": \"", a.content,
          "\" has id ", a.id, ": expected an id below ", entries, " (the ids must cover 0..size-1 with no gap)");
    n = std::max(n, a.id + 1);
  }
  check(n > 0, "tokenizer.json: field \"model.vocab\" is empty: expected at least one token");
  tokens_.assign(n, std::string());
  std::vector<uint8_t> seen(n, 0);
  added_kind_.assign(n, 0);
  for (const auto& [text, id] : spec_.vocab) {
    check(!seen[id], "tokenizer.json: field \"model.vocab\": id ", id, " is given to both \"", tokens_[id], "\" and \"",
          text, "\": expected distinct ids");
    seen[id] = 1;
    tokens_[id] = text;
  }
  for (const AddedToken& a : spec_.added) {
    check(!a.content.empty(), "tokenizer.json: field \"added_tokens\": id ", a.id,
          " has an empty \"content\": expected the token's text");
    check(seen[a.id] != 2 && (!seen[a.id] || tokens_[a.id] == a.content), "tokenizer.json: field \"added_tokens\": \"",
          a.content, "\" has id ", a.id, ", which is \"", tokens_[a.id], "\" already: expected a free id or its own");
    seen[a.id] = 2;
    tokens_[a.id] = a.content;
  }
  for (int32_t id = 0; id < n; ++id)
    check(seen[id] != 0, "tokenizer.json: no token has id ", id, ": expected the ids of \"model.vocab\" and ",
          "\"added_tokens\" to cover 0..", n - 1, " with no gap");

  by_text_.reserve(n);
  bytes_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const auto [it, fresh] = by_text_.emplace(tokens_[id], id);
    check(fresh, "tokenizer.json: ids ", it->second, " and ", id, " are both \"", tokens_[id],
          "\": expected distinct tokens");
    bytes_[id] = token_bytes(tokens_[id]);
  }
  for (const AddedToken& a : spec_.added) added_kind_[a.id] = a.special ? 2 : 1;
  if (spec_.ignore_merges)
    for (const auto& [text, id] : spec_.vocab)
      if (!added_kind_[id] && in_alphabet(text)) by_bytes_.emplace(bytes_[id], id);
  for (int b = 0; b < 256; ++b) {
    std::string c;
    append_utf8(c, byte_to_char()[b]);
    const auto it = by_text_.find(c);
    byte_id_[b] = it != by_text_.end() && !added_kind_[it->second] ? it->second : -1;
  }

  if (spec_.unk_token) {
    const auto it = by_text_.find(*spec_.unk_token);
    check(it != by_text_.end(), "tokenizer.json: field \"model.unk_token\" = \"", *spec_.unk_token,
          "\" is not in the vocabulary: expected one of its tokens, or null");
    unk_ = it->second;
  }

  auto pairs = std::make_shared<PairTable>(spec_.merges.size());
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    // Named references, not a structured binding: Clang 14 (the wasm build's) cannot capture those.
    const std::string& a = spec_.merges[r].first;
    const std::string& b = spec_.merges[r].second;
    const auto ia = by_text_.find(a), ib = by_text_.find(b), im = by_text_.find(a + b);
    const auto missing = [&](const std::string& t) {
      return detail::cat("tokenizer.json: field \"model.merges[", r, "]\" = \"", a, " ", b, "\": \"", t,
                         "\" is not in the vocabulary: expected merges of vocabulary tokens into a vocabulary token");
    };
    if (ia == by_text_.end()) throw Error(missing(a));
    if (ib == by_text_.end()) throw Error(missing(b));
    if (im == by_text_.end()) throw Error(missing(a + b));
    pairs->insert(ia->second, ib->second, static_cast<int32_t>(r), im->second);
  }
  pairs_ = std::move(pairs);

  for (const AddedToken& a : spec_.added) matchable_.push_back(&a);
  std::stable_sort(matchable_.begin(), matchable_.end(),
                   [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (const AddedToken* a : matchable_) first_byte_[static_cast<unsigned char>(a->content[0])] = true;
}

int32_t Bpe::find(std::string_view token) const {
  const auto it = by_text_.find(std::string(token));
  return it == by_text_.end() ? -1 : it->second;
}

// --- encode ------------------------------------------------------------------------------------------------

void Bpe::merge(std::vector<int32_t>& s) const {
  const PairTable& table = *pairs_;
  if (s.size() <= 48) {
    // Short pieces (nearly all): rescan for the lowest rank, leftmost first. O(n^2), n small.
    while (s.size() > 1) {
      int32_t best = INT32_MAX, at = -1, merged = 0;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] < 0 || s[i + 1] < 0) continue;
        const PairTable::Slot* p = table.find(s[i], s[i + 1]);
        if (p && p->rank < best) best = p->rank, at = static_cast<int32_t>(i), merged = p->merged;
      }
      if (at < 0) break;
      s[at] = merged;
      s.erase(s.begin() + at + 1);
    }
    return;
  }
  // Long pieces (a run of spaces, a long word): a heap of (rank, position) over a linked list, each entry
  // checked when popped against the symbols it was made from. Same order as above: lowest rank, then the
  // leftmost (a merged symbol keeps its left part's position).
  const int n = static_cast<int>(s.size());
  std::vector<int32_t> prev(n), next(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Entry {
    int32_t rank, pos, left, right;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  const auto push = [&](int i) {
    const int j = next[i];
    if (j < 0 || s[i] < 0 || s[j] < 0) return;
    if (const PairTable::Slot* p = table.find(s[i], s[j])) heap.push({p->rank, i, s[i], s[j]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<uint8_t> dead(n, 0);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int i = e.pos, j = next[i];
    if (dead[i] || j < 0 || s[i] != e.left || s[j] != e.right) continue;
    s[i] = table.find(e.left, e.right)->merged;
    dead[j] = 1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) push(prev[i]);
    push(i);
  }
  size_t w = 0;
  for (int i = 0; i >= 0; i = next[i]) s[w++] = s[i];
  s.resize(w);
}

void Bpe::encode_piece(std::string_view piece, WordCache* cache, std::vector<int32_t>& ids) const {
  if (spec_.ignore_merges) {
    const auto it = by_bytes_.find(std::string(piece));
    if (it != by_bytes_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const uint64_t h = cache ? WordCache::hash(piece) : 0;
  std::span<const int32_t> cached;
  if (cache && cache->find(piece, h, cached)) {
    ids.insert(ids.end(), cached.begin(), cached.end());
    return;
  }
  thread_local std::vector<int32_t> symbols;
  symbols.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  merge(symbols);
  // A byte with no token of its own: unk, or dropped when there is none (both reference implementations).
  size_t w = 0;
  for (const int32_t v : symbols)
    if (v >= 0 || unk_ >= 0) symbols[w++] = v >= 0 ? v : unk_;
  symbols.resize(w);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  // The Rust crate caches 10,000 words, @huggingface/tokenizers 10,000 in LRU order; here the first 65,536
  // distinct pieces (bpe_cache.h): enough for a book's words, bounded for a stream.
  if (cache) cache->insert(piece, h, symbols);
}

void Bpe::encode_text(std::string_view text, WordCache* cache, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  thread_local std::string prefixed;
  if (spec_.add_prefix_space && text[0] != ' ') {
    // clear + push_back rather than assign(" "), which trips GCC 12's false -Wrestrict warning.
    prefixed.clear();
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  if (!spec_.use_regex) {
    encode_piece(text, cache, ids);
    return;
  }
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  split_gpt2(text, pieces);
  for (std::string_view p : pieces) encode_piece(p, cache, ids);
}

std::vector<int32_t> Bpe::encode(std::string_view text, bool split_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  std::unique_lock<std::mutex> lock(cache_mutex_, std::try_to_lock);
  WordCache* cache = lock.owns_lock() ? &cache_ : nullptr;
  size_t start = 0;  // start of the stretch of plain text not yet encoded
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    if (first_byte_[static_cast<unsigned char>(text[pos])]) {
      for (const AddedToken* a : matchable_) {
        if (split_special && a->special) continue;
        if (text.compare(pos, a->content.size(), a->content) == 0) {
          hit = a;
          break;
        }
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    encode_text(text.substr(start, (hit->lstrip ? trim_end(text, start, pos) : pos) - start), cache, ids);
    ids.push_back(hit->id);
    pos += hit->content.size();
    if (hit->rstrip)
      for (size_t len; pos < text.size() && is_js_space(text, pos, len);) pos += len;
    start = pos;
  }
  encode_text(text.substr(start), cache, ids);
  return ids;
}

// --- decode ------------------------------------------------------------------------------------------------

std::string Bpe::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string text, pending;  // pending: bytes of model tokens since the last added token
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check(id >= 0 && id < size(), "decode: token id ", id, " at position ", i, " is out of range: expected [0, ",
          size(), ")");
    if (added_kind_[id] == 0) {
      pending += bytes_[id];
      continue;
    }
    if (skip_special && added_kind_[id] == 2) continue;
    // An added token is written as its text and ends the byte run before it (each run is read as UTF-8 on
    // its own: @huggingface/tokenizers' ByteLevel decoder).
    append_utf8_lossy(text, pending);
    pending.clear();
    text += tokens_[id];
  }
  append_utf8_lossy(text, pending);
  return text;
}

}  // namespace qkv::bpe
