#pragma once
// Byte-level BPE's pre-tokenization: GPT-2's split pattern, by hand, and the byte <-> character alphabet.
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::bpe {

// Appends to `pieces` the matches of GPT-2's pattern in `text`, in order (they tile the text):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \p{L}, \p{N} and \s as JavaScript's RegExp defines them (bpe_unicode.h). Written by hand rather than
// with std::regex, which knows no Unicode classes and is slow: each alternative is a run of one class, so
// one pass with a lookahead of one character decides every match. Throws qkv::Error naming the byte offset
// when text is not well-formed UTF-8.
void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces);

// GPT-2's bytes_to_unicode: bytes that are printable and not space map to the code point of the same value
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF), the other 68 to U+0100, U+0101, ... in byte order, so that a
// token's bytes read as a printable string ("Ġ" = U+0120 is the space byte 0x20).
const std::array<char32_t, 256>& byte_to_char();
// The inverse: the byte a code point stands for, or -1 when it is not in the alphabet.
int char_to_byte(char32_t cp);

// The UTF-8 decoding of well-formed text at `pos`: the code point, and `len` set to its byte length;
// `len` = 0 when the bytes at `pos` are not a well-formed character.
char32_t decode_utf8(std::string_view s, size_t pos, size_t& len);
void append_utf8(std::string& out, char32_t cp);
// Appends `bytes` as UTF-8 with every maximal invalid subsequence replaced by U+FFFD (the WHATWG decoder's
// rule, which is also Rust's String::from_utf8_lossy): what Hugging Face's ByteLevel decoder renders.
void append_utf8_lossy(std::string& out, std::string_view bytes);

}  // namespace qkv::bpe
