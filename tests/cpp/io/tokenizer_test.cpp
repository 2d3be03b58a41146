// Tokenizer: the vocabulary each kind builds, encode/decode round trips, the JSON form, and bad input
// refused with a qkv::Error that names the argument or field.
#include "qkv/tokenizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "test_util.h"

namespace qkv::tokenizer_test {
namespace {

using test::message_of;

using Ids = std::vector<int32_t>;

#define EXPECT_ERROR_HAS(statement, text) \
  EXPECT_NE(message_of([&] { (void)(statement); }).find(text), std::string::npos) << "expected: " << (text)

const std::vector<std::string> kSpecials = {"<pad>", "<bos>", "<eos>", "<unk>"};

std::vector<std::string> with_specials(std::vector<std::string> tokens) {
  tokens.insert(tokens.begin(), kSpecials.begin(), kSpecials.end());
  return tokens;
}

// --- char ------------------------------------------------------------------------------------------------

TEST(TokenizerChar, VocabularyIsSpecialsThenSortedDistinctChars) {
  const Tokenizer tok = Tokenizer::char_level("hello world");
  EXPECT_EQ(tok.kind(), "char");
  EXPECT_EQ(tok.vocabulary(), with_specials({" ", "d", "e", "h", "l", "o", "r", "w"}));
  EXPECT_EQ(tok.size(), 12);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 3);
}

TEST(TokenizerChar, EncodeDecodeRoundTrip) {
  const Tokenizer tok = Tokenizer::char_level("hello world");
  const Ids ids = tok.encode("hello world");
  EXPECT_EQ(ids, (Ids{7, 6, 8, 8, 9, 4, 11, 9, 10, 8, 5}));
  EXPECT_EQ(tok.decode(ids), "hello world");
}

TEST(TokenizerChar, MultibyteCharactersAreOneTokenEach) {
  // "é" is 2 bytes, "—" 3 bytes, "😀" 4 bytes in UTF-8; sorted by code point: a, é, —, 😀.
  const std::string text = "a—é😀a";
  const Tokenizer tok = Tokenizer::char_level(text, {.pad = false, .bos = false, .eos = false, .unk = false});
  EXPECT_EQ(tok.vocabulary(), (std::vector<std::string>{"a", "é", "—", "😀"}));
  const Ids ids = tok.encode(text);
  EXPECT_EQ(ids, (Ids{0, 2, 1, 3, 0}));
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TokenizerChar, UnknownCharacterEncodesToUnk) {
  const Tokenizer tok = Tokenizer::char_level("hello world");
  EXPECT_EQ(tok.encode("hex"), (Ids{7, 6, 3}));
  EXPECT_EQ(tok.encode("hé"), (Ids{7, 3}));
  // unk survives skip_special: dropping it would silently change the text.
  EXPECT_EQ(tok.decode(tok.encode("hex")), "he<unk>");
}

TEST(TokenizerChar, UnknownCharacterWithoutUnkIsAnError) {
  const Tokenizer tok = Tokenizer::char_level("hello", {.unk = false});
  EXPECT_EQ(tok.unk_id(), -1);
  const std::string message = message_of([&] { tok.encode("helé"); });
  EXPECT_NE(message.find("'é' (U+00E9) at character 3 (byte offset 3)"), std::string::npos) << message;
  EXPECT_NE(message.find("no unk token"), std::string::npos) << message;
}

TEST(TokenizerChar, BosAndEosAdded) {
  const Tokenizer tok = Tokenizer::char_level("ab");
  EXPECT_EQ(tok.encode("ba", true, true), (Ids{1, 5, 4, 2}));
  EXPECT_EQ(tok.encode("ba", true, false), (Ids{1, 5, 4}));
  EXPECT_EQ(tok.encode("ba", false, true), (Ids{5, 4, 2}));
  EXPECT_EQ(tok.decode(Ids{1, 5, 4, 2, 0, 0}), "ba");
  EXPECT_EQ(tok.decode(Ids{1, 5, 4, 2, 0}, false), "<bos>ba<eos><pad>");
}

TEST(TokenizerChar, SpecialsKeepTheirFixedOrder) {
  const Tokenizer tok = Tokenizer::char_level("ab", {.pad = false, .bos = true, .eos = false, .unk = true});
  EXPECT_EQ(tok.vocabulary(), (std::vector<std::string>{"<bos>", "<unk>", "a", "b"}));
  EXPECT_EQ(tok.pad_id(), -1);
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), -1);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_ERROR_HAS(tok.encode("a", false, true), "add_eos = true but this tokenizer has no eos token");
}

TEST(TokenizerChar, BadInput) {
  EXPECT_ERROR_HAS(Tokenizer::char_level(""), "char_level: text is empty");
  EXPECT_ERROR_HAS(Tokenizer::char_level("ab\xff"), "byte 0xFF at byte offset 2");
  EXPECT_ERROR_HAS(Tokenizer::char_level("a\xc3"), "byte 0xC3 at byte offset 1");         // truncated sequence
  EXPECT_ERROR_HAS(Tokenizer::char_level("\xc0\xaf"), "byte 0xC0 at byte offset 0");      // overlong "/"
  EXPECT_ERROR_HAS(Tokenizer::char_level("\xed\xa0\x80"), "byte 0xED at byte offset 0");  // surrogate
  const Tokenizer tok = Tokenizer::char_level("ab");
  EXPECT_ERROR_HAS(tok.encode("a\x80"), "encode: text is not valid UTF-8: byte 0x80 at byte offset 1");
}

// --- byte ------------------------------------------------------------------------------------------------

TEST(TokenizerByte, SizeIs256PlusSpecials) {
  EXPECT_EQ(Tokenizer::byte_level().size(), 260);
  EXPECT_EQ(Tokenizer::byte_level({.pad = true, .bos = false, .eos = true, .unk = false}).size(), 258);
  const Tokenizer bare = Tokenizer::byte_level({false, false, false, false});
  EXPECT_EQ(bare.size(), 256);
  EXPECT_EQ(bare.pad_id(), -1);
  EXPECT_EQ(bare.kind(), "byte");
}

TEST(TokenizerByte, ArbitraryBytesRoundTrip) {
  const Tokenizer tok = Tokenizer::byte_level();
  std::string bytes;
  for (int b = 255; b >= 0; --b) bytes.push_back(static_cast<char>(b));
  bytes += std::string("\0\xff\x80z", 4);
  const Ids ids = tok.encode(bytes, true, true);
  ASSERT_EQ(ids.size(), bytes.size() + 2);
  EXPECT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(ids[1], 4 + 255);
  EXPECT_EQ(ids[256], 4 + 0);
  EXPECT_EQ(ids.back(), tok.eos_id());
  EXPECT_EQ(tok.decode(ids), bytes);
}

// --- word ------------------------------------------------------------------------------------------------

const char* kCats = "The cat sat. The cat ran!";

TEST(TokenizerWord, KeepsTheMostFrequentWithDeterministicTies) {
  // Counts after lower-casing: the 2, cat 2, sat 1, . 1, ran 1, ! 1. Equal counts rank byte-wise:
  // "cat" < "the", and "!" (0x21) < "." (0x2E) < "ran" < "sat".
  const Tokenizer tok = Tokenizer::word_level(kCats, 7);
  EXPECT_EQ(tok.kind(), "word");
  EXPECT_EQ(tok.size(), 7);
  EXPECT_EQ(tok.vocabulary(), with_specials({"cat", "the", "!"}));
  // the=5 cat=4 sat->unk .->unk the cat ran->unk !=6
  EXPECT_EQ(tok.encode(kCats), (Ids{5, 4, 3, 3, 5, 4, 3, 6}));
  EXPECT_EQ(tok.decode(tok.encode("the cat ran!")), "the cat <unk>!");
}

TEST(TokenizerWord, FullVocabularyAndPunctuationSplit) {
  const Tokenizer tok = Tokenizer::word_level(kCats, 100);
  EXPECT_EQ(tok.vocabulary(), with_specials({"cat", "the", "!", ".", "ran", "sat"}));
  const Ids ids = tok.encode("The cat sat.");
  EXPECT_EQ(ids, (Ids{5, 4, 9, 7}));
  EXPECT_EQ(tok.decode(ids), "the cat sat.");
  EXPECT_EQ(tok.decode(tok.encode(kCats, true, true)), "the cat sat. the cat ran!");
  EXPECT_EQ(tok.decode(tok.encode("sat.cat,the", true)), "sat. cat <unk> the");
  // Punctuation is split even without whitespace, and opening brackets take no space after them.
  const Tokenizer brackets = Tokenizer::word_level("(a) [b], c!", 100);
  EXPECT_EQ(brackets.decode(brackets.encode("(a) [b], c!")), "(a) [b], c!");
}

TEST(TokenizerWord, LowercaseIsAnOption) {
  const Tokenizer tok = Tokenizer::word_level(kCats, 100, {}, false);
  EXPECT_FALSE(tok.lowercase());
  // Byte-wise, "The" (0x54) ranks before "cat" (0x63).
  EXPECT_EQ(tok.vocabulary(), with_specials({"The", "cat", "!", ".", "ran", "sat"}));
  EXPECT_EQ(tok.encode("the The"), (Ids{3, 4}));
}

TEST(TokenizerWord, NonAsciiBelongsToWords) {
  const Tokenizer tok = Tokenizer::word_level("café — naïve", 100);
  EXPECT_EQ(tok.vocabulary(), with_specials({"café", "naïve", "—"}));
}

TEST(TokenizerWord, BadInput) {
  EXPECT_ERROR_HAS(Tokenizer::word_level(kCats, 4), "max_vocab = 4 is too small: expected at least 5");
  EXPECT_ERROR_HAS(Tokenizer::word_level(kCats, 1, {.pad = false, .bos = false, .eos = false}),
                   "max_vocab = 1 is too small: expected at least 2");
  EXPECT_ERROR_HAS(Tokenizer::word_level(kCats, 10, {.unk = false}), "SpecialTokens::unk = false: expected true");
  EXPECT_ERROR_HAS(Tokenizer::word_level("", 10), "text has no words");
  EXPECT_ERROR_HAS(Tokenizer::word_level(" \n\t", 10), "text has no words");
  EXPECT_ERROR_HAS(Tokenizer::word_level("ok \xfe", 10), "word_level: text is not valid UTF-8: byte 0xFE");
}

// --- decode ----------------------------------------------------------------------------------------------

TEST(TokenizerDecode, OutOfRangeIdsNameThePosition) {
  const Tokenizer byte = Tokenizer::byte_level();
  EXPECT_ERROR_HAS(byte.decode(Ids{10, 20, 300}), "token id 300 at position 2 is out of range: expected [0, 260)");
  EXPECT_ERROR_HAS(byte.decode(Ids{-1}), "token id -1 at position 0 is out of range: expected [0, 260)");
  EXPECT_ERROR_HAS(byte.decode(Ids{260}), "token id 260 at position 0 is out of range");
  EXPECT_EQ(byte.decode(Ids{259 - 0}), "\xff");
  const Tokenizer word = Tokenizer::word_level(kCats, 7);
  EXPECT_ERROR_HAS(word.decode(Ids{4, 7}), "token id 7 at position 1 is out of range: expected [0, 7)");
}

// --- JSON ------------------------------------------------------------------------------------------------

void expect_same(const Tokenizer& a, const Tokenizer& b, const std::string& text) {
  EXPECT_EQ(a.kind(), b.kind());
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.vocabulary(), b.vocabulary());
  EXPECT_EQ(a.pad_id(), b.pad_id());
  EXPECT_EQ(a.bos_id(), b.bos_id());
  EXPECT_EQ(a.eos_id(), b.eos_id());
  EXPECT_EQ(a.unk_id(), b.unk_id());
  EXPECT_EQ(a.encode(text), b.encode(text));
  EXPECT_EQ(b.to_json(), a.to_json());
}

TEST(TokenizerJson, CharRoundTrip) {
  const Tokenizer tok = Tokenizer::char_level("hello — wörld", {.bos = false});
  const Tokenizer back = Tokenizer::from_json(tok.to_json());
  expect_same(tok, back, "hello — wörld?");
  EXPECT_EQ(back.decode(back.encode("wörld")), "wörld");
}

TEST(TokenizerJson, ByteRoundTrip) {
  const Tokenizer tok = Tokenizer::byte_level({.pad = false, .unk = false});
  EXPECT_EQ(tok.to_json(), R"({"version":1,"kind":"byte","special":{"pad":false,"bos":true,"eos":true,"unk":false}})");
  expect_same(tok, Tokenizer::from_json(tok.to_json()), std::string("\0\xff\x01", 3));
}

TEST(TokenizerJson, WordRoundTrip) {
  const Tokenizer tok = Tokenizer::word_level(kCats, 8);
  EXPECT_EQ(tok.to_json(), R"({"version":1,"kind":"word","special":{"pad":true,"bos":true,"eos":true,"unk":true},)"
                           R"("lowercase":true,"vocab":["cat","the","!","."]})");
  expect_same(tok, Tokenizer::from_json(tok.to_json()), "The cat sat. A dog ran!");
  const Tokenizer cased = Tokenizer::word_level(kCats, 8, {}, false);
  const Tokenizer cased_back = Tokenizer::from_json(cased.to_json());
  EXPECT_FALSE(cased_back.lowercase());
  expect_same(cased, cased_back, "The cat sat. the cat ran!");
}

TEST(TokenizerJson, MalformedOrTruncated) {
  const std::string good = Tokenizer::word_level(kCats, 8).to_json();
  EXPECT_ERROR_HAS(Tokenizer::from_json(good.substr(0, good.size() / 2)), "tokenizer JSON: not valid JSON");
  EXPECT_ERROR_HAS(Tokenizer::from_json(""), "tokenizer JSON: not valid JSON");
  EXPECT_ERROR_HAS(Tokenizer::from_json("{kind: word}"), "tokenizer JSON: not valid JSON");
  EXPECT_ERROR_HAS(Tokenizer::from_json("[1, 2]"), "the top level = [1,2] is not an object");
}

TEST(TokenizerJson, WrongOrMissingFields) {
  const std::string special = R"("special":{"pad":true,"bos":true,"eos":true,"unk":true})";
  const auto doc = [&](const std::string& fields) { return "{" + fields + "}"; };
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"foo",)" + special)),
                   R"(field "kind" = "foo" is unknown: expected "char", "byte" or "word")");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":7,)" + special)),
                   R"(field "kind" = 7 has the wrong type: expected a string)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,)" + special)), R"(field "kind" is missing)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("kind":"byte",)" + special)), R"(field "version" is missing)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":2,"kind":"byte",)" + special)),
                   R"(field "version" = 2 is unsupported: expected 1)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"byte")")), R"(field "special" is missing)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(doc(R"("version":1,"kind":"byte","special":{"pad":true,"bos":true,"eos":true})")),
      R"(field "special.unk" is missing)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(doc(R"("version":1,"kind":"byte","special":{"pad":1,"bos":true,"eos":true,"unk":true})")),
      R"(field "special.pad" = 1 has the wrong type: expected true or false)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(
          doc(R"("version":1,"kind":"byte","special":{"pad":true,"bos":true,"eos":true,"unk":true,"sep":true})")),
      R"(field "special.sep" is unknown)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"byte","vocab":["a"],)" + special)),
                   R"(field "vocab" is unknown for kind "byte")");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"char","lowercase":true,"vocab":["a"],)" + special)),
                   R"(field "lowercase" is unknown for kind "char")");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"char",)" + special)), R"(field "vocab" is missing)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"char","vocab":"ab",)" + special)),
                   R"(field "vocab" = "ab" has the wrong type: expected an array of strings)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"char","vocab":[],)" + special)),
                   R"(field "vocab" is empty)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"char","vocab":["a",3],)" + special)),
                   R"(field "vocab[1]" = 3 has the wrong type: expected a string)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"char","vocab":["a","bc"],)" + special)),
                   R"(field "vocab[1]" = "bc" is not one character)");
  EXPECT_ERROR_HAS(Tokenizer::from_json(doc(R"("version":1,"kind":"word","vocab":["a"],)" + special)),
                   R"(field "lowercase" is missing)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(doc(R"("version":1,"kind":"word","lowercase":true,"vocab":["a b"],)" + special)),
      R"(field "vocab[0]" = "a b" is not a single word)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(doc(R"("version":1,"kind":"word","lowercase":true,"vocab":["end."],)" + special)),
      R"(field "vocab[0]" = "end." is not a single word)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(doc(R"("version":1,"kind":"word","lowercase":true,"vocab":["The"],)" + special)),
      R"(field "vocab[0]" = "The" has upper-case letters but "lowercase" is true)");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(
          R"({"version":1,"kind":"word","lowercase":true,"vocab":["a"],"special":{"pad":true,"bos":true,"eos":true,"unk":false}})"),
      R"(field "special.unk" = false is invalid for kind "word")");
}

TEST(TokenizerJson, DuplicateVocabularyEntries) {
  const std::string special = R"("special":{"pad":true,"bos":true,"eos":true,"unk":true})";
  EXPECT_ERROR_HAS(Tokenizer::from_json(R"({"version":1,"kind":"char","vocab":["a","b","a"],)" + special + "}"),
                   R"(field "vocab[2]" = "a" is a duplicate of vocab[0])");
  EXPECT_ERROR_HAS(
      Tokenizer::from_json(R"({"version":1,"kind":"word","lowercase":false,"vocab":["x","cat","y","cat"],)" + special +
                           "}"),
      R"(field "vocab[3]" = "cat" is a duplicate of vocab[1])");
}

}  // namespace
}  // namespace qkv::tokenizer_test
