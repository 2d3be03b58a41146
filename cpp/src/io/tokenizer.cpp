// Tokenizer: char (code points), byte and word kinds, and their JSON form. See qkv/tokenizer.h.
#include "qkv/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "io/bpe.h"
#include "io/bpe_pretokenize.h"
#include "qkv/error.h"

namespace qkv {
namespace {

constexpr const char* kSpecialNames[4] = {"pad", "bos", "eos", "unk"};

std::string special_text(const char* name) { return std::string("<") + name + ">"; }

int special_count(SpecialTokens s) { return int(s.pad) + int(s.bos) + int(s.eos) + int(s.unk); }

// --- UTF-8 ---------------------------------------------------------------------------------------------

// Length of the well-formed UTF-8 sequence starting at s[pos], or 0 when it is not one (a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate or a value above U+10FFFF): the BPE
// pre-tokenizer's decoder, one definition of well-formed for every tokenizer.
size_t utf8_length(std::string_view s, size_t pos) {
  size_t n = 0;
  bpe::decode_utf8(s, pos, n);
  return n;
}

uint32_t code_point(std::string_view c) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(c[i])); };
  switch (c.size()) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

std::string hex(uint32_t value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*X", digits, static_cast<unsigned>(value));
  return buf;
}

// "'é' (U+00E9)", or just "U+000A" for control characters, which would garble the message.
std::string describe_char(std::string_view c) {
  // detail::cat rather than operator+ chains, which trip GCC 12's false -Wrestrict warning.
  const uint32_t cp = code_point(c);
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) return detail::cat("U+", hex(cp, 4));
  return detail::cat("'", c, "' (U+", hex(cp, 4), ")");
}

// Throws naming the first offending byte; `what` names the argument.
void check_utf8(std::string_view s, const char* what) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = utf8_length(s, pos);
    check(n > 0, what, " is not valid UTF-8: byte 0x", hex(static_cast<unsigned char>(s[pos]), 2), " at byte offset ",
          pos, " does not start a well-formed character: expected UTF-8 text (use Tokenizer::byte_level for ",
          "arbitrary bytes)");
    pos += n;
  }
}

// The code points of well-formed UTF-8 text, each as its byte sequence.
std::vector<std::string_view> split_chars(std::string_view s) {
  std::vector<std::string_view> chars;
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = utf8_length(s, pos);
    chars.push_back(s.substr(pos, n));
    pos += n;
  }
  return chars;
}

// --- words ---------------------------------------------------------------------------------------------

// ASCII only, independent of the C locale, so that native and wasm builds split identically.
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool is_punct(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }

// Whitespace separates words; each punctuation character is a word of its own.
std::vector<std::string> split_words(std::string_view text, bool lowercase) {
  std::vector<std::string> words;
  std::string word;
  const auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char c : text) {
    if (is_space(c)) {
      flush();
    } else if (is_punct(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      word.push_back(lowercase && is_upper(c) ? static_cast<char>(c - 'A' + 'a') : c);
    }
  }
  flush();
  return words;
}

bool no_space_before(const std::string& w) {
  return w.size() == 1 && std::string_view(".,!?;:)]}%").find(w[0]) != std::string_view::npos;
}
bool no_space_after(const std::string& w) { return w == "(" || w == "[" || w == "{"; }

// --- JSON ----------------------------------------------------------------------------------------------

using nlohmann::json;

// A value as it appears in the JSON, shortened so that a long vocabulary does not flood the message.
std::string shown(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// name and path are views taken by value: the result refers into `parent` only, and with reference parameters
// that callers fill with temporaries GCC 13+ warns (-Wdangling-reference) that it might refer to those.
const json& field(const json& parent, std::string_view name, std::string_view path, json::value_t type,
                  const char* expected) {
  const std::string key(name);
  check(parent.contains(key), "tokenizer JSON: field \"", path, "\" is missing");
  const json& j = parent.at(key);
  // Any integer kind counts as a number for "version".
  const bool ok = type == json::value_t::number_unsigned ? j.is_number_integer() : j.type() == type;
  check(ok, "tokenizer JSON: field \"", path, "\" = ", shown(j), " has the wrong type: expected ", expected);
  return j;
}

}  // namespace

// --- construction ----------------------------------------------------------------------------------------

Tokenizer::Tokenizer(Kind kind, SpecialTokens specials, bool lowercase, const std::vector<std::string>& vocab)
    : kind_(kind), specials_(specials), lowercase_(lowercase) {
  const bool enabled[4] = {specials.pad, specials.bos, specials.eos, specials.unk};
  int32_t* ids[4] = {&pad_, &bos_, &eos_, &unk_};
  for (int i = 0; i < 4; ++i)
    if (enabled[i]) {
      *ids[i] = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(special_text(kSpecialNames[i]));
    }
  first_ = static_cast<int32_t>(tokens_.size());
  tokens_.reserve(tokens_.size() + vocab.size());
  for (const std::string& t : vocab) {
    // Byte ids are computed directly (first_ + byte); only char and word tokens need the lookup table.
    if (kind != Kind::Byte) ids_.emplace(t, static_cast<int32_t>(tokens_.size()));
    tokens_.push_back(t);
  }
}

Tokenizer Tokenizer::char_level(std::string_view text, SpecialTokens specials) {
  check(!text.empty(), "char_level: text is empty: expected a training text with at least one character");
  check_utf8(text, "char_level: text");
  std::vector<std::string_view> chars = split_chars(text);
  // Byte-wise order of UTF-8 sequences is code point order.
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return Tokenizer(Kind::Char, specials, false, std::vector<std::string>(chars.begin(), chars.end()));
}

Tokenizer Tokenizer::byte_level(SpecialTokens specials) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  return Tokenizer(Kind::Byte, specials, false, bytes);
}

Tokenizer Tokenizer::word_level(std::string_view text, int max_vocab, SpecialTokens specials, bool lowercase) {
  check(specials.unk, "word_level: SpecialTokens::unk = false: expected true, since words outside the vocabulary ",
        "encode to unk");
  const int n_special = special_count(specials);
  check(max_vocab >= n_special + 1, "word_level: max_vocab = ", max_vocab, " is too small: expected at least ",
        n_special + 1, " (", n_special, " special tokens + 1 word)");
  check_utf8(text, "word_level: text");
  std::unordered_map<std::string, int64_t> counts;
  for (std::string& w : split_words(text, lowercase)) ++counts[std::move(w)];
  check(!counts.empty(), "word_level: text has no words: expected a training text with at least one word");

  // Most frequent first; equal counts in byte-wise order, so the vocabulary depends only on the text.
  std::vector<std::pair<std::string, int64_t>> ranked(counts.begin(), counts.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  const size_t keep = std::min(ranked.size(), static_cast<size_t>(max_vocab - n_special));
  std::vector<std::string> vocab;
  vocab.reserve(keep);
  for (size_t i = 0; i < keep; ++i) vocab.push_back(std::move(ranked[i].first));
  return Tokenizer(Kind::Word, specials, lowercase, vocab);
}

std::string Tokenizer::kind() const {
  switch (kind_) {
    case Kind::Char: return "char";
    case Kind::Byte: return "byte";
    case Kind::Word: return "word";
    case Kind::Bpe: return "bpe";
  }
  return "";
}

// --- encode / decode -------------------------------------------------------------------------------------

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool add_eos, bool split_special) const {
  check(!add_bos || bos_ >= 0, "encode: add_bos = true but this tokenizer has no bos token: expected add_bos = false ",
        "or a tokenizer built with SpecialTokens::bos");
  check(!add_eos || eos_ >= 0, "encode: add_eos = true but this tokenizer has no eos token: expected add_eos = false ",
        "or a tokenizer built with SpecialTokens::eos");
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(bos_);
  switch (kind_) {
    case Kind::Bpe: {
      std::vector<int32_t> body = bpe_->encode(text, split_special);
      if (ids.empty() && !add_eos) return body;
      ids.insert(ids.end(), body.begin(), body.end());
      break;
    }
    case Kind::Byte:
      ids.reserve(ids.size() + text.size() + 1);
      for (char c : text) ids.push_back(first_ + static_cast<unsigned char>(c));
      break;
    case Kind::Char: {
      check_utf8(text, "encode: text");
      size_t index = 0, offset = 0;
      for (std::string_view c : split_chars(text)) {
        const auto it = ids_.find(std::string(c));
        if (it != ids_.end()) {
          ids.push_back(it->second);
        } else {
          check(unk_ >= 0, "encode: character ", describe_char(c), " at character ", index, " (byte offset ", offset,
                ") is not in the vocabulary and this tokenizer has no unk token: expected only characters of the ",
                "vocabulary, or a tokenizer built with SpecialTokens::unk");
          ids.push_back(unk_);
        }
        ++index;
        offset += c.size();
      }
      break;
    }
    case Kind::Word: {
      check_utf8(text, "encode: text");
      // Word tokenizers always have unk (word_level and from_json require it).
      for (const std::string& w : split_words(text, lowercase_)) {
        const auto it = ids_.find(w);
        ids.push_back(it != ids_.end() ? it->second : unk_);
      }
      break;
    }
  }
  if (add_eos) ids.push_back(eos_);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  if (kind_ == Kind::Bpe) return bpe_->decode(ids, skip_special);
  std::string text;
  const std::string* previous = nullptr;  // the last word written, for word-level spacing
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check(id >= 0 && id < size(), "decode: token id ", id, " at position ", i, " is out of range: expected [0, ",
          size(), ")");
    if (skip_special && id < first_ && id != unk_) continue;
    const std::string& t = tokens_[id];
    if (kind_ == Kind::Word) {
      if (previous && !no_space_before(t) && !no_space_after(*previous)) text.push_back(' ');
      previous = &t;
    }
    text += t;
  }
  return text;
}

// --- JSON ------------------------------------------------------------------------------------------------

std::string Tokenizer::to_json() const {
  if (kind_ == Kind::Bpe) return bpe::to_hf_json(bpe_->spec());
  // ordered_json keeps the fields in the order a reader expects: version, kind, special, ...
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["kind"] = kind();
  j["special"] = {{"pad", specials_.pad}, {"bos", specials_.bos}, {"eos", specials_.eos}, {"unk", specials_.unk}};
  if (kind_ == Kind::Word) j["lowercase"] = lowercase_;
  if (kind_ != Kind::Byte) j["vocab"] = std::vector<std::string>(tokens_.begin() + first_, tokens_.end());
  return j.dump();
}

namespace detail {
// Reads a parsed document; a friend, so that the public header need not mention nlohmann.
struct TokenizerJson {
  static Tokenizer parse(const nlohmann::json& j);
};
}  // namespace detail

Tokenizer Tokenizer::from_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw Error(std::string("tokenizer JSON: not valid JSON (malformed or truncated): ") + e.what());
  } catch (const json::exception& e) {
    // A number beyond a double's range is not a parse_error but an out_of_range (406); found by fuzzing.
    throw Error(std::string("tokenizer JSON: not valid JSON (a number out of range): ") + e.what());
  }
  try {
    // Hugging Face's tokenizer.json has a "model"; qkv's form never does.
    if (j.is_object() && j.contains("model"))
      return Tokenizer(std::make_shared<const bpe::Bpe>(bpe::spec_from_hf_json(j)));
    // Hugging Face's other top-level fields without its "model": said as such, rather than read as qkv's form and
    // refused for its "version" (a string there, an integer here).
    if (j.is_object() && !j.contains("kind"))
      for (const char* key : {"added_tokens", "pre_tokenizer", "decoder", "normalizer", "post_processor"})
        check(!j.contains(key), "tokenizer JSON: it has Hugging Face's \"", key,
              "\" but no \"model\": expected the tokenizer's model, {\"type\": \"BPE\", \"vocab\": ..., ",
              "\"merges\": ...}, under \"model\"");
    return detail::TokenizerJson::parse(j);
  } catch (const json::exception& e) {
    // The checks below look at each value's type before reading it, so this is a safety net only.
    throw Error(std::string("tokenizer JSON: ") + e.what());
  }
}

Tokenizer detail::TokenizerJson::parse(const nlohmann::json& j) {
  using Kind = Tokenizer::Kind;
  check(j.is_object(), "tokenizer JSON: the top level = ", shown(j), " is not an object: expected {\"version\": 1, ",
        "\"kind\": ..., ...}");
  const json& version = field(j, "version", "version", json::value_t::number_unsigned, "an integer");
  check(version == 1, "tokenizer JSON: field \"version\" = ", shown(version), " is unsupported: expected 1");
  const std::string kind = field(j, "kind", "kind", json::value_t::string, "a string").get<std::string>();
  check(kind == "char" || kind == "byte" || kind == "word", "tokenizer JSON: field \"kind\" = \"", kind,
        "\" is unknown: expected \"char\", \"byte\" or \"word\" (a bpe tokenizer's JSON is a Hugging Face ",
        "tokenizer.json, with a \"model\" field)");

  std::vector<std::string> allowed = {"version", "kind", "special"};
  if (kind != "byte") allowed.push_back("vocab");
  if (kind == "word") allowed.push_back("lowercase");
  for (const auto& [key, value] : j.items())
    check(std::find(allowed.begin(), allowed.end(), key) != allowed.end(), "tokenizer JSON: field \"", key,
          "\" is unknown for kind \"", kind, "\": expected only \"version\", \"kind\", \"special\"",
          kind == "byte" ? "" : ", \"vocab\"", kind == "word" ? ", \"lowercase\"" : "");

  const json& special = field(j, "special", "special", json::value_t::object, "an object of four booleans");
  for (const auto& [key, value] : special.items())
    check(std::find(std::begin(kSpecialNames), std::end(kSpecialNames), key) != std::end(kSpecialNames),
          "tokenizer JSON: field \"special.", key, "\" is unknown: expected \"pad\", \"bos\", \"eos\" or \"unk\"");
  bool flags[4];
  for (int i = 0; i < 4; ++i)
    flags[i] = field(special, kSpecialNames[i], std::string("special.") + kSpecialNames[i], json::value_t::boolean,
                     "true or false")
                   .get<bool>();
  const SpecialTokens specials{flags[0], flags[1], flags[2], flags[3]};

  if (kind == "byte") return Tokenizer::byte_level(specials);

  bool lowercase = false;
  if (kind == "word") {
    lowercase = field(j, "lowercase", "lowercase", json::value_t::boolean, "true or false").get<bool>();
    check(specials.unk, "tokenizer JSON: field \"special.unk\" = false is invalid for kind \"word\": expected true, ",
          "since words outside the vocabulary encode to unk");
  }
  const json& vocab_json = field(j, "vocab", "vocab", json::value_t::array, "an array of strings");
  check(!vocab_json.empty(), "tokenizer JSON: field \"vocab\" is empty: expected at least one token");
  std::vector<std::string> vocab;
  vocab.reserve(vocab_json.size());
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < vocab_json.size(); ++i) {
    const std::string path = "vocab[" + std::to_string(i) + "]";
    const json& entry = vocab_json[i];
    check(entry.is_string(), "tokenizer JSON: field \"", path, "\" = ", shown(entry),
          " has the wrong type: expected a string");
    std::string t = entry.get<std::string>();
    // nlohmann accepts only valid UTF-8 strings, so t is well formed here.
    if (kind == "char") {
      check(!t.empty() && utf8_length(t, 0) == t.size(), "tokenizer JSON: field \"", path, "\" = ", shown(entry),
            " is not one character: expected exactly one Unicode code point");
    } else {
      const std::vector<std::string> split = split_words(t, false);
      check(split.size() == 1 && split[0] == t, "tokenizer JSON: field \"", path, "\" = ", shown(entry),
            " is not a single word: expected no whitespace, and punctuation only as a one-character token");
      check(!lowercase || std::none_of(t.begin(), t.end(), is_upper), "tokenizer JSON: field \"", path,
            "\" = ", shown(entry), " has upper-case letters but \"lowercase\" is true: expected lower-case words only");
    }
    const auto [it, inserted] = seen.emplace(t, i);
    check(inserted, "tokenizer JSON: field \"", path, "\" = ", shown(entry), " is a duplicate of vocab[", it->second,
          "]: expected distinct tokens");
    vocab.push_back(std::move(t));
  }
  return Tokenizer(kind == "char" ? Kind::Char : Kind::Word, specials, lowercase, vocab);
}

}  // namespace qkv
