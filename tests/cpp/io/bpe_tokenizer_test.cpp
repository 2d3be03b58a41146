// Byte-level BPE (Tokenizer's bpe kind) against Hugging Face's own JavaScript implementation: the ids and
// decoded texts in tests/fixtures/bpe/cases.json were written by @huggingface/tokenizers
// (tests/fixtures/make_bpe_fixtures.mjs) for a small GPT-2 tokenizer (GPT-2's first 400 merges), read here
// from tokenizer.json and from vocab.json + merges.txt. Also: training, the JSON round trip, and refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/bpe_pretokenize.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "test_util.h"

namespace qkv::bpe_tokenizer_test {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

std::string read_text(const std::string& name) {
  std::ifstream in(std::string(QKV_FIXTURES_DIR) + "/bpe/" + name, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name << ": run node tests/fixtures/make_bpe_fixtures.mjs";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

using test::message_of;

#define EXPECT_ERROR_HAS(statement, text) \
  EXPECT_NE(message_of([&] { (void)(statement); }).find(text), std::string::npos) << "expected: " << (text)

// The fixture tokenizer with its merges as ["a", "b"] and ByteLevel's add_prefix_space set: the "prefix"
// configuration of make_bpe_fixtures.mjs.
std::string prefix_variant(const std::string& tokenizer_json) {
  json j = json::parse(tokenizer_json);
  json pairs = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["model"]["merges"] = pairs;
  j["pre_tokenizer"]["add_prefix_space"] = true;
  return j.dump();
}

struct Fixture {
  Tokenizer base = Tokenizer::from_json(read_text("tokenizer.json"));
  Tokenizer prefix = Tokenizer::from_json(prefix_variant(read_text("tokenizer.json")));
  Tokenizer files = Tokenizer::from_vocab_merges(read_text("vocab.json"), read_text("merges.txt"));
  json cases = json::parse(read_text("cases.json"));
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

TEST(BpeTokenizer, EncodesAsHuggingFaceDoes) {
  const Fixture& f = fixture();
  ASSERT_GT(f.cases["encode"].size(), 60u);
  for (const json& c : f.cases["encode"]) {
    const std::string text = c["text"], config = c["config"];
    const Ids expected = c["ids"].get<Ids>();
    SCOPED_TRACE("config " + config + ", text: " + text);
    if (config == "base") {
      EXPECT_EQ(f.base.encode(text), expected);
      EXPECT_EQ(f.files.encode(text), expected) << "vocab.json + merges.txt";
    } else if (config == "prefix") {
      EXPECT_EQ(f.prefix.encode(text), expected);
    } else {
      EXPECT_EQ(f.base.encode(text, false, false, /*split_special=*/true), expected);
      EXPECT_EQ(f.files.encode(text, false, false, true), expected) << "vocab.json + merges.txt";
    }
  }
}

TEST(BpeTokenizer, DecodesAsHuggingFaceDoes) {
  const Fixture& f = fixture();
  ASSERT_GT(f.cases["decode"].size(), 40u);
  for (const json& c : f.cases["decode"]) {
    const Ids ids = c["ids"].get<Ids>();
    const bool skip = c["skipSpecial"];
    SCOPED_TRACE(c["ids"].dump() + (skip ? " skipping specials" : ""));
    EXPECT_EQ(f.base.decode(ids, skip), c["text"].get<std::string>());
    EXPECT_EQ(f.files.decode(ids, skip), c["text"].get<std::string>());
  }
}

TEST(BpeTokenizer, DescribesGpt2) {
  const Tokenizer& t = fixture().base;
  EXPECT_EQ(t.kind(), "bpe");
  EXPECT_EQ(t.size(), 256 + 400 + 1);
  EXPECT_EQ(t.eos_id(), 656);  // <|endoftext|>
  EXPECT_EQ(t.bos_id(), 656);
  EXPECT_EQ(t.pad_id(), -1);
  EXPECT_EQ(t.unk_id(), -1);
  EXPECT_EQ(t.vocabulary()[256], "Ġt");  // GPT-2's first merge, "Ġ t"
  EXPECT_EQ(t.encode("hi", true, true), (Ids{656, 71, 72, 656}));
}

TEST(BpeTokenizer, SplitsLikeGpt2sPattern) {
  const auto split = [](std::string_view s) {
    std::vector<std::string_view> pieces;
    bpe::split_gpt2(s, pieces);
    return std::vector<std::string>(pieces.begin(), pieces.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("it's 'll"), (V{"it", "'s", " '", "ll"}));
  EXPECT_EQ(split("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("a \n\tb  "), (V{"a", " \n", "\t", "b", "  "}));
  EXPECT_EQ(split("x1234 ?!"), (V{"x", "1234", " ?!"}));
  EXPECT_EQ(split("日本 語"), (V{"日本", " 語"}));
}

TEST(BpeTokenizer, DecodesInvalidUtf8LikeTheWhatwgDecoder) {
  // One U+FFFD per maximal subpart (Unicode 3-7): the lead and the continuations that fit so far.
  const auto lossy = [](std::string_view bytes) {
    std::string out;
    bpe::append_utf8_lossy(out, bytes);
    return out;
  };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("a\xE2\x82"), "a" + r);
  EXPECT_EQ(lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(lossy("\xF0\x9F\x99"
                  "a"),
            r + "a");
  EXPECT_EQ(lossy("\xC0\xAF"), r + r);
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(lossy("\xE0\xA0"), r);
}

TEST(BpeTokenizer, JsonRoundTripsAndLoadsByItsModelField) {
  const Tokenizer& t = fixture().base;
  const std::string j = t.to_json();
  const Tokenizer back = Tokenizer::from_json(j);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.kind(), "bpe");
  const std::string text = "Hello <|endoftext|> world, it's 2024!\n";
  EXPECT_EQ(back.encode(text), t.encode(text));
  const json parsed = json::parse(j);
  EXPECT_EQ(parsed["model"]["type"], "BPE");
  EXPECT_EQ(parsed["model"]["merges"][0], json({"Ġ", "t"}));
}

TEST(BpeTokenizer, TrainsDeterministically) {
  std::string text;
  for (int i = 0; i < 20; ++i)
    text += "the cat sat on the mat. the dog sat on the log.<|endoftext|>The end, isn't it? 12 34\n";
  const Tokenizer a = Tokenizer::train_bpe(text, 256 + 1 + 20);
  const Tokenizer b = Tokenizer::train_bpe(text, 256 + 1 + 20);
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.size(), 277);
  // Ids: <|endoftext|> 0, then the bytes in the order of GPT-2's alphabet ('!' = 33 is id 1).
  EXPECT_EQ(a.vocabulary()[0], "<|endoftext|>");
  EXPECT_EQ(a.vocabulary()[1], "!");
  EXPECT_EQ(a.eos_id(), 0);
  // Per repetition: "he" occurs 5 times (the, 3x " the", The); then "at" and "t"+"he" 4 times each, and the
  // tie goes to the lower left id ('a' before 't' in GPT-2's alphabet).
  const json j = json::parse(a.to_json());
  EXPECT_EQ(j["model"]["merges"][0], json({"h", "e"}));
  EXPECT_EQ(j["model"]["merges"][1], json({"a", "t"}));
  EXPECT_EQ(j["model"]["merges"][2], json({"t", "he"}));
  // Encoding a training line gives fewer ids than bytes and decodes back.
  const std::string line = "the cat sat on the mat.<|endoftext|>";
  const Ids ids = a.encode(line);
  EXPECT_LT(ids.size(), line.size() / 2);
  EXPECT_EQ(a.decode(ids, false), line);
  EXPECT_EQ(a.decode(ids, true), "the cat sat on the mat.");
  // Asked for more than the text has pairs for: it stops when every piece is one token.
  const Tokenizer all = Tokenizer::train_bpe(text, 1000);
  EXPECT_LT(all.size(), 1000);
  for (const char* word : {"the", " cat", " isn", "'t", " log", " 34", "\n"})
    EXPECT_EQ(all.encode(word).size(), 1u) << word;
  EXPECT_ERROR_HAS(Tokenizer::train_bpe(text, 100), "vocab_size = 100 is out of range");
  EXPECT_ERROR_HAS(Tokenizer::train_bpe("", 300), "text is empty");
  // A special token that is one byte's character would take that byte's token, and the byte would vanish from text.
  BpeTrainOptions byte_special;
  byte_special.special_tokens = {"<|endoftext|>", "a"};
  EXPECT_ERROR_HAS(Tokenizer::train_bpe("banana", 300, byte_special),
                   "special_tokens[1] = \"a\" is the text of byte 97's token");
  // Text that is not UTF-8, in training and in encoding: the byte in hex (it read 0x255 for 0xFF).
  EXPECT_ERROR_HAS(Tokenizer::train_bpe("\xff abc", 300), "text is not valid UTF-8: byte 0xFF at byte offset 0");
  EXPECT_ERROR_HAS(all.encode("ok \xc3("), "text is not valid UTF-8: byte 0xC3 at byte offset 3");
}

TEST(BpeTokenizer, RefusesMalformedFilesNamingTheField) {
  const std::string good = read_text("tokenizer.json");
  const auto edited = [&](const std::function<void(json&)>& edit) {
    json j = json::parse(good);
    edit(j);
    return j.dump();
  };
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"]["type"] = "WordPiece"; })),
                   "field \"model.type\" = \"WordPiece\" is not supported");
  // Hugging Face's file without its "model": said so, not refused for its "version" as if it were qkv's form.
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j.erase("model"); })),
                   "tokenizer JSON: it has Hugging Face's \"added_tokens\" but no \"model\"");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"].erase("vocab"); })),
                   "\"model.vocab\" is missing");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"]["merges"][3] = "Ġt"; })),
                   "field \"model.merges[3]\" = \"Ġt\" is malformed");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) {
                     j["model"]["merges"][5] = json::array({"zz", "q"});
                   })),
                   "\"model.merges[5]\" = \"zz q\": \"zz\" is not in the vocabulary");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"]["vocab"]["Ġt"] = 5; })),
                   "id 5 is given to both");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"]["vocab"].erase("Ġt"); })),
                   "no token has id 256");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"]["vocab"]["Ġt"] = 1000000000; })),
                   "token \"Ġt\" has id 1000000000: expected an id below 658");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["pre_tokenizer"]["type"] = "Whitespace"; })),
                   "field \"pre_tokenizer.type\" = \"Whitespace\" is not supported");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) {
                     j["normalizer"] = {{"type", "NFC"}};
                   })),
                   "field \"normalizer\"");
  // Truncation and padding change the ids Hugging Face gives: refused by name (null, as GPT-2's files have, loads).
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) {
                     j["truncation"] = {{"max_length", 4}};
                   })),
                   "field \"truncation\" = {\"max_length\":4} is not supported");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["padding"] = {{"length", 8}}; })), "field \"padding\"");
  EXPECT_NO_THROW(Tokenizer::from_json(edited([](json& j) { j["truncation"] = nullptr; })));
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["decoder"]["type"] = "WordPiece"; })),
                   "field \"decoder.type\" = \"WordPiece\"");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["model"]["dropout"] = 0.1; })), "\"model.dropout\"");
  EXPECT_ERROR_HAS(Tokenizer::from_json(edited([](json& j) { j["added_tokens"][0]["id"] = 3; })),
                   "\"<|endoftext|>\" has id 3, which is \"$\" already");
  EXPECT_ERROR_HAS(Tokenizer::from_json(good.substr(0, good.size() / 2)), "not valid JSON");
  EXPECT_ERROR_HAS(Tokenizer::from_vocab_merges(read_text("vocab.json"), "#version: 0.2\nĠ t\nbad\n"),
                   "merges.txt: line 3 = \"bad\" is malformed");
  EXPECT_ERROR_HAS(Tokenizer::from_vocab_merges("[1]", "#version: 0.2\n"), "vocab.json: the top level");
  // Sequence wrapping one ByteLevel is accepted; anything more is not.
  const Tokenizer seq = Tokenizer::from_json(edited([](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({j["pre_tokenizer"]})}};
  }));
  EXPECT_EQ(seq.encode("Hello world"), fixture().base.encode("Hello world"));
}

TEST(BpeTokenizer, AMergeListedTwiceKeepsItsLaterRank) {
  // @huggingface/tokenizers (and the Rust crate) build the rank map in order, a later entry replacing an
  // earlier one: "b c" ranks 2, after "a b", so "abc" is "ab" "c" (ids 3, 2: what @huggingface/tokenizers
  // 0.2.0 gives for this file).
  const Tokenizer t = Tokenizer::from_json(
      R"({"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},)"
      R"("decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4},)"
      R"("merges":["b c","a b","b c"]}})");
  EXPECT_EQ(t.encode("abc"), (Ids{3, 2}));
  // Bytes with no token of their own (here all but a, b, c) are dropped when there is no unk_token.
  EXPECT_EQ(t.encode("abxc"), (Ids{3, 2}));
}

TEST(BpeTokenizer, RefusesBadIdsAndText) {
  const Tokenizer& t = fixture().base;
  EXPECT_ERROR_HAS(t.decode(Ids{1, 657}), "token id 657 at position 1 is out of range: expected [0, 657)");
  EXPECT_ERROR_HAS(t.decode(Ids{-1}), "token id -1 at position 0 is out of range");
  EXPECT_ERROR_HAS(t.encode("ab\xFF"), "byte offset 2");
}

}  // namespace
}  // namespace qkv::bpe_tokenizer_test
