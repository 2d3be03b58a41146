#pragma once
// Tokenizer: text <-> token ids for the models, in four kinds.
//
//   char  one token per Unicode code point of UTF-8 text; the vocabulary is the distinct code points of a
//         training text, sorted by code point (nanoGPT's char-level Shakespeare). Code points rather than
//         bytes, so "é" or "—" is one token and decoding can never split a character.
//   byte  one token per byte value 0..255: no training text, nothing is ever unknown, any bytes round trip.
//   word  whitespace splits words and every ASCII punctuation character is a token of its own
//         ("sat." -> "sat", "."); ASCII letters are lower-cased by default. The vocabulary keeps the most
//         frequent words of a training text (ties: byte-wise ascending), the rest encode to unk.
//   bpe   byte-level BPE, GPT-2's: read from Hugging Face's tokenizer.json or GPT-2's vocab.json +
//         merges.txt, or trained from text (train_bpe), and id for id what Hugging Face's implementation
//         (@huggingface/tokenizers, which the tests run) gives, decode included. The algorithm and what it
//         accepts: cpp/src/io/bpe.h.
//
// char, byte, word: the enabled special tokens come first in the fixed order pad, bos, eos, unk (so pad is
// id 0 when present, the models' default padding id), then the vocabulary in order. Special tokens are never
// produced from text: "<bos>" in a text encodes as ordinary characters or words.
//
// bpe: the ids are the file's. Its special tokens are its "added_tokens" marked special (GPT-2:
// <|endoftext|>); encode matches them wherever they occur in the text unless split_special is set (then they
// encode as plain text, as Hugging Face's encode_special_tokens does). bos_id() and eos_id() are
// <|endoftext|>'s id when the tokenizer has it (GPT-2 starts and separates documents with it), unk_id() the
// model's unk_token, pad_id() -1.
//
// Char, word and bpe tokenizers take UTF-8 text; invalid UTF-8 raises qkv::Error naming the byte offset (use
// the byte tokenizer for arbitrary bytes). For word, whitespace and punctuation are ASCII only: other
// characters, such as U+00A0 or "—", belong to words.
//
// JSON form (to_json / from_json), e.g.
//   {"version":1,"kind":"word","special":{"pad":true,"bos":true,"eos":true,"unk":true},
//    "lowercase":true,"vocab":["the","cat","."]}
// "vocab" (char and word) lists the non-special tokens in id order; "lowercase" is for word only; byte
// has neither. Every field is required and unknown fields are refused, so a typo cannot pass silently.
// A bpe tokenizer's JSON form is Hugging Face's tokenizer.json itself (from_json tells the two apart by its
// "model" field): a checkpoint's "qkv.tokenizer" then loads in Hugging Face's libraries as it is, and there is
// one format to keep rather than a second wrapping of the same vocabulary and merges.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkv {

namespace detail {
struct TokenizerJson;
}
namespace bpe {
class Bpe;
}

// train_bpe's options.
struct BpeTrainOptions {
  // Added tokens marked special, ids 0, 1, ... in this order; cut out of the training text, not trained on.
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  bool add_prefix_space = false;  // the pre-tokenizer's: a space before text that has none
};

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
  // Byte-level BPE trained on `text` (UTF-8) to vocab_size tokens (fewer when the text runs out of pairs);
  // the rule, its tie-break and the id layout: cpp/src/io/bpe_train.cpp. Deterministic.
  static Tokenizer train_bpe(std::string_view text, int vocab_size, const BpeTrainOptions& options = {});
  // GPT-2's older files: vocab.json ({token: id}) and merges.txt ("#version" line, then "a b" per line),
  // with ByteLevel pre-tokenization (no prefix space) and <|endoftext|>, when in vocab.json, special.
  static Tokenizer from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt);
  // The qkv JSON form, or a Hugging Face tokenizer.json (a "bpe" tokenizer). Throws qkv::Error naming the
  // field when the JSON is malformed, truncated or inconsistent, or asks for what is not implemented (a
  // "WordPiece" model, a normalizer, ...).
  static Tokenizer from_json(std::string_view json);
  std::string to_json() const;

  // Characters (char) or words (word) outside the vocabulary encode to unk; with no unk token that is a
  // qkv::Error naming the character and its position. add_bos / add_eos need those tokens.
  // split_special (bpe only; the other kinds never match special tokens in text): encode special tokens
  // found in the text as plain text rather than as their ids.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool add_eos = false,
                              bool split_special = false) const;
  // skip_special drops pad, bos and eos; unk always decodes to "<unk>", since dropping it would silently
  // change the text. bpe: skip_special drops the special added tokens, and the bytes are read as UTF-8
  // with U+FFFD for each maximal invalid subsequence (Hugging Face's ByteLevel decoder). Word tokens are joined by
  // single spaces, except before closing punctuation
  // (. , ! ? ; : ) ] } %) and after opening brackets (( [ {). Throws qkv::Error on an id out of range.
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  int size() const { return static_cast<int>(tokens_.size()); }  // vocabulary size including specials
  int pad_id() const { return pad_; }                            // -1 when absent
  int bos_id() const { return bos_; }
  int eos_id() const { return eos_; }
  int unk_id() const { return unk_; }
  std::string kind() const;  // "char", "byte", "word" or "bpe"
  SpecialTokens specials() const { return specials_; }
  bool lowercase() const { return lowercase_; }  // word only; false for the other kinds
  // Every token's text in id order, specials as "<pad>" etc. (byte tokens are single, possibly non-UTF-8, bytes;
  // bpe tokens are as tokenizer.json spells them, in GPT-2's alphabet: " the" is "Ġthe").
  const std::vector<std::string>& vocabulary() const { return tokens_; }

 private:
  friend struct detail::TokenizerJson;
  enum class Kind { Char, Byte, Word, Bpe };
  Tokenizer(Kind kind, SpecialTokens specials, bool lowercase, const std::vector<std::string>& vocab);
  explicit Tokenizer(std::shared_ptr<const bpe::Bpe> bpe);  // tokenizer_bpe.cpp

  Kind kind_;
  SpecialTokens specials_;
  bool lowercase_ = false;
  int32_t pad_ = -1, bos_ = -1, eos_ = -1, unk_ = -1;
  int32_t first_ = 0;                             // id of the first non-special token
  std::vector<std::string> tokens_;               // id -> text
  std::unordered_map<std::string, int32_t> ids_;  // text -> id, non-special tokens only
  std::shared_ptr<const bpe::Bpe> bpe_;           // kind bpe: the model (immutable, shared by copies)
};

}  // namespace qkv
