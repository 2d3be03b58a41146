// GPT-2's split pattern by hand, the byte-level alphabet, and UTF-8 helpers. See bpe_pretokenize.h.
#include "io/bpe_pretokenize.h"

#include <cstdio>

#include "io/bpe_unicode.h"
#include "qkv/error.h"

namespace qkv::bpe {

char32_t decode_utf8(std::string_view s, size_t pos, size_t& len) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  len = 0;
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  size_t n;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (pos + n > s.size()) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  len = n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b0 = byte(i);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    // How many continuation bytes the lead byte asks for, and the range its first one must lie in (which
    // excludes overlong forms, surrogates and values past U+10FFFF: Unicode's table 3-7).
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 2;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 3;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    // A maximal subpart: the lead and the continuations that fit so far become one U+FFFD.
    size_t k = 1;
    while (k <= need && i + k < n && byte(i + k) >= (k == 1 ? lo : 0x80) && byte(i + k) <= (k == 1 ? hi : 0xBF)) ++k;
    if (need > 0 && k == need + 1) {
      out.append(bytes.substr(i, k));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += k;
  }
}

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

namespace {

// The text decoded on the fly: the class of the character at a byte offset, and where it ends.
struct Scanner {
  std::string_view s;

  // Class of the character at pos (pos < s.size()); `end` is set to the offset after it.
  CharClass at(size_t pos, size_t& end) const {
    const unsigned char b = static_cast<unsigned char>(s[pos]);
    if (b < 0x80) {
      end = pos + 1;
      return char_class(b);
    }
    size_t len;
    const char32_t cp = decode_utf8(s, pos, len);
    if (len == 0) {  // encoding or training alike: the byte in hex, as the char tokenizer names it
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(b));
      throw Error(detail::cat("text is not valid UTF-8: byte ", byte, " at byte offset ", pos,
                              " does not start a well-formed character: expected UTF-8 text"));
    }
    end = pos + len;
    return char_class(cp);
  }

  // The offset after the run of characters of class `c` starting at pos.
  size_t run(size_t pos, CharClass c) const {
    while (pos < s.size()) {
      size_t end;
      if (at(pos, end) != c) break;
      pos = end;
    }
    return pos;
  }
};

// The length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0.
size_t contraction(std::string_view s, size_t pos) {
  if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
  const char a = s[pos + 1];
  if (pos + 2 < s.size()) {
    const char b = s[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return (a == 's' || a == 't' || a == 'm' || a == 'd') ? 2 : 0;
}

}  // namespace

void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces) {
  const Scanner sc{text};
  size_t pos = 0;
  while (pos < text.size()) {
    if (const size_t n = contraction(text, pos)) {
      pieces.push_back(text.substr(pos, n));
      pos += n;
      continue;
    }
    size_t after;
    CharClass c = sc.at(pos, after);
    // " ?X+": a space joins the run of letters, numbers or other characters right after it.
    size_t start_of_run = pos;
    if (text[pos] == ' ' && after < text.size()) {
      size_t after2;
      const CharClass next = sc.at(after, after2);
      if (next != CharClass::Space) c = next, start_of_run = after;
    }
    size_t end;
    if (c != CharClass::Space) {
      end = sc.run(start_of_run, c);
    } else {
      // "\s+(?!\S)|\s+": the whole run of whitespace when it ends the text; otherwise all of it but its last
      // character (which then leads the next match, " ?X+"), unless that leaves nothing.
      end = sc.run(pos, CharClass::Space);
      if (end < text.size()) {
        size_t last = pos, e;
        for (size_t p = pos; p < end; p = e) {
          sc.at(p, e);
          last = p;
        }
        if (last > pos) end = last;
      }
    }
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace qkv::bpe
