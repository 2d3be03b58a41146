#pragma once
// The character classes of GPT-2's pre-tokenizer pattern (\p{L}, \p{N}, \s), as range tables generated from
// JavaScript's RegExp by scripts/gen-bpe-unicode.mjs (bpe_unicode_tables.cpp names the Unicode version).
#include <array>
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

// Latin-1 (U+0000..U+00FF), most text's bulk, is one inline table lookup; the rest a binary search in the
// range tables (the pre-tokenizer asks once per character, so the call itself showed in profiles).
extern const std::array<CharClass, 256> kLatin1Classes;
CharClass char_class_beyond_latin1(char32_t cp);
inline CharClass char_class(char32_t cp) { return cp < 256 ? kLatin1Classes[cp] : char_class_beyond_latin1(cp); }

}  // namespace qkv::bpe
