// char_class: an ASCII table, then a binary search in the generated range tables (bpe_unicode_tables.cpp).
#include "io/bpe_unicode.h"

#include <algorithm>
#include <array>

namespace qkv::bpe {
namespace {

bool in_ranges(char32_t cp, const CodeRange* ranges, int count) {
  // The first range whose last >= cp holds cp when its first <= cp.
  const CodeRange* end = ranges + count;
  const CodeRange* it = std::lower_bound(ranges, end, cp, [](const CodeRange& r, char32_t c) { return r.last < c; });
  return it != end && it->first <= cp;
}

CharClass classify(char32_t cp) {
  if (in_ranges(cp, kLetterRanges, kLetterRangeCount)) return CharClass::Letter;
  if (in_ranges(cp, kNumberRanges, kNumberRangeCount)) return CharClass::Number;
  if (in_ranges(cp, kSpaceRanges, kSpaceRangeCount)) return CharClass::Space;
  return CharClass::Other;
}

}  // namespace

const std::array<CharClass, 256> kLatin1Classes = [] {
  std::array<CharClass, 256> t{};
  for (char32_t c = 0; c < 256; ++c) t[c] = classify(c);
  return t;
}();

CharClass char_class_beyond_latin1(char32_t cp) { return classify(cp); }

}  // namespace qkv::bpe
