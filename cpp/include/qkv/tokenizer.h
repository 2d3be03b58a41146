#pragma once
// Tokenizer: text <-> token ids for the models, in three kinds.
//
//   char  one token per Unicode code point of UTF-8 text; the vocabulary is the distinct code points of a
//         training text, sorted by code point (nanoGPT's char-level Shakespeare). Code points rather than
//         bytes, so "é" or "—" is one token and decoding can never split a character.
//   byte  one token per byte value 0..255: no training text, nothing is ever unknown, any bytes round trip.
//   word  whitespace splits words and every ASCII punctuation character is a token of its own
//         ("sat." -> "sat", "."); ASCII letters are lower-cased by default. The vocabulary keeps the most
//         frequent words of a training text (ties: byte-wise ascending), the rest encode to unk.
//
// Ids: the enabled special tokens come first in the fixed order pad, bos, eos, unk (so pad is id 0 when
// present, the models' default padding id), then the vocabulary in order. Special tokens are never produced
// from text: "<bos>" in a text encodes as ordinary characters or words.
//
// Char and word tokenizers take UTF-8 text; invalid UTF-8 raises qkv::Error naming the byte offset (use the
// byte tokenizer for arbitrary bytes). Whitespace and punctuation are ASCII only: other characters, such as
// U+00A0 or "—", belong to words.
//
// JSON form (to_json / from_json), e.g.
//   {"version":1,"kind":"word","special":{"pad":true,"bos":true,"eos":true,"unk":true},
//    "lowercase":true,"vocab":["the","cat","."]}
// "vocab" (char and word) lists the non-special tokens in id order; "lowercase" is for word only; byte
// has neither. Every field is required and unknown fields are refused, so a typo cannot pass silently.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkv {

namespace detail {
struct TokenizerJson;
}

// Which special tokens exist. They render as "<pad>", "<bos>", "<eos>", "<unk>" when decoded.
struct SpecialTokens {
  bool pad = true;
  bool bos = true;
  bool eos = true;
  bool unk = true;
};

class Tokenizer {
 public:
  // Vocabulary: the distinct code points of `text`. Throws qkv::Error when text is empty or not UTF-8.
  static Tokenizer char_level(std::string_view text, SpecialTokens specials = {});
  // Vocabulary: the 256 byte values (id = number of specials + byte).
  static Tokenizer byte_level(SpecialTokens specials = {});
  // Vocabulary: the most frequent words of `text`, so that size() <= max_vocab (specials included).
  // Needs the unk token (new words encode to it) and max_vocab >= number of specials + 1.
  static Tokenizer word_level(std::string_view text, int max_vocab, SpecialTokens specials = {}, bool lowercase = true);
  // Throws qkv::Error naming the field when the JSON is malformed, truncated or inconsistent.
  static Tokenizer from_json(std::string_view json);
  std::string to_json() const;

  // Characters (char) or words (word) outside the vocabulary encode to unk; with no unk token that is a
  // qkv::Error naming the character and its position. add_bos / add_eos need those tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool add_eos = false) const;
  // skip_special drops pad, bos and eos; unk always decodes to "<unk>", since dropping it would silently
  // change the text. Word tokens are joined by single spaces, except before closing punctuation
  // (. , ! ? ; : ) ] } %) and after opening brackets (( [ {). Throws qkv::Error on an id out of range.
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  int size() const { return static_cast<int>(tokens_.size()); }  // vocabulary size including specials
  int pad_id() const { return pad_; }                            // -1 when absent
  int bos_id() const { return bos_; }
  int eos_id() const { return eos_; }
  int unk_id() const { return unk_; }
  std::string kind() const;  // "char", "byte" or "word"
  SpecialTokens specials() const { return specials_; }
  bool lowercase() const { return lowercase_; }  // word only; false for the other kinds
  // Every token's text in id order, specials as "<pad>" etc. (byte tokens are single, possibly non-UTF-8, bytes).
  const std::vector<std::string>& vocabulary() const { return tokens_; }

 private:
  friend struct detail::TokenizerJson;
  enum class Kind { Char, Byte, Word };
  Tokenizer(Kind kind, SpecialTokens specials, bool lowercase, const std::vector<std::string>& vocab);

  Kind kind_;
  SpecialTokens specials_;
  bool lowercase_ = false;
  int32_t pad_ = -1, bos_ = -1, eos_ = -1, unk_ = -1;
  int32_t first_ = 0;                             // id of the first non-special token
  std::vector<std::string> tokens_;               // id -> text
  std::unordered_map<std::string, int32_t> ids_;  // text -> id, non-special tokens only
};

}  // namespace qkv
