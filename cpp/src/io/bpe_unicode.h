#pragma once
// The character classes of GPT-2's pre-tokenizer pattern (\p{L}, \p{N}, \s), as range tables generated from
// JavaScript's RegExp by scripts/gen-bpe-unicode.mjs (bpe_unicode_tables.cpp names the Unicode version).
#include <cstdint>

namespace qkv::bpe {

struct CodeRange {
  char32_t first, last;  // inclusive
};

extern const CodeRange kLetterRanges[];
extern const int kLetterRangeCount;
extern const CodeRange kNumberRanges[];
extern const int kNumberRangeCount;
extern const CodeRange kSpaceRanges[];
extern const int kSpaceRangeCount;
extern const char* const kUnicodeVersion;

// The pattern's alternatives look at which of these a code point is: the classes are disjoint.
enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass char_class(char32_t cp);

}  // namespace qkv::bpe
