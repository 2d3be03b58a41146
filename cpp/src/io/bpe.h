#pragma once
// Byte-level BPE as Hugging Face's `tokenizers` runs it for GPT-2 (the model of Tokenizer's "bpe" kind,
// qkv/tokenizer.h). Encoding a text:
//   1. added tokens (e.g. <|endoftext|>) are cut out of the text wherever they occur, leftmost-longest; with
//      lstrip / rstrip the whitespace before / after one is dropped;
//   2. each stretch between them gets a leading space when add_prefix_space is set and it has none, and is
//      split by GPT-2's pattern (bpe_pretokenize.h) unless use_regex is false;
//   3. each piece starts as its bytes, one symbol each (the byte's character of GPT-2's alphabet), and the
//      adjacent pair of lowest merge rank is merged, the leftmost of equal ranks first, until no adjacent
//      pair is a merge; the symbols are the piece's tokens.
// Decoding joins the tokens' bytes and reads them as UTF-8 with U+FFFD for each maximal invalid
// subsequence; an added token is written as its text, as @huggingface/tokenizers does.
//
// Ids are the model vocabulary's overlaid with the added tokens' and must cover 0..size-1 exactly.
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/bpe_cache.h"

namespace qkv::bpe {

// An entry of tokenizer.json's "added_tokens" (single_word is refused: @huggingface/tokenizers ignores it
// where the Rust crate honours it, so no behaviour would match both).
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;  // dropped by decode's skip_special; not matched in text with split_special
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // kept for export only: there is no normalizer
};

// What a tokenizer.json (or vocab.json + merges.txt, or training) describes, before validation.
struct Spec {
  std::vector<std::pair<std::string, int32_t>> vocab;       // model "vocab": token text (GPT-2 alphabet), id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added;
  std::optional<std::string> unk_token;
  bool add_prefix_space = false;
  bool use_regex = true;
  bool ignore_merges = false;  // a piece that is a whole vocabulary token is that token, unmerged
};

class Bpe {
 public:
  // Validates (throws qkv::Error naming the field: merges whose parts or result are not in the vocabulary,
  // duplicate or missing ids, an unk_token outside it).
  explicit Bpe(Spec spec);

  // Text (UTF-8) to ids; split_special encodes special added tokens found in the text as plain text.
  std::vector<int32_t> encode(std::string_view text, bool split_special) const;
  // skip_special drops special added tokens. Throws qkv::Error on an id outside [0, size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  int size() const { return static_cast<int>(tokens_.size()); }
  const std::vector<std::string>& tokens() const { return tokens_; }  // id -> token text, added tokens included
  int32_t find(std::string_view token) const;                         // id of a token's text, or -1
  const Spec& spec() const { return spec_; }

 private:
  struct PairTable;
  // cache: the word cache, or nullptr when another thread holds it.
  void encode_text(std::string_view text, WordCache* cache, std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view piece, WordCache* cache, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& symbols) const;

  Spec spec_;
  std::vector<std::string> tokens_;                    // id -> text
  std::vector<std::string> bytes_;                     // id -> the bytes it decodes to
  std::vector<uint8_t> added_kind_;                    // id -> 0 model token, 1 added, 2 special added
  std::unordered_map<std::string, int32_t> by_text_;   // token text -> id
  std::unordered_map<std::string, int32_t> by_bytes_;  // a model token's bytes -> id (ignore_merges)
  int32_t byte_id_[256];                               // byte -> id of its one-character token, or -1
  int32_t unk_ = -1;
  std::shared_ptr<const PairTable> pairs_;    // (left id, right id) -> (rank, merged id)
  std::vector<const AddedToken*> matchable_;  // added tokens by decreasing length (leftmost-longest)
  bool first_byte_[256];                      // bytes that start some added token

  // Pieces already encoded: shared by the copies of a tokenizer, so guarded. An encode call takes the lock
  // once, if it is free; when another thread's encode holds it, this one runs without the cache (same ids,
  // slower) rather than waiting.
  mutable std::mutex cache_mutex_;
  mutable WordCache cache_;
};

// tokenizer.json (parsed by the caller, which looks at its "model" field to tell it from qkv's form) and its
// writer: bpe_json.cpp.
Spec spec_from_hf_json(const nlohmann::json& j);
Spec spec_from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt);
std::string to_hf_json(const Spec& spec);

// Training: bpe_train.cpp.
struct TrainOptions {
  std::vector<std::string> special_tokens;
  bool add_prefix_space = false;
};
Spec train(std::string_view text, int vocab_size, const TrainOptions& options);

}  // namespace qkv::bpe
