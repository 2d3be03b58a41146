// Tokenizer for JS: the core's tokenizers, crossing as their JSON.
#include "qkv/tokenizer.h"

#include "convert.h"

namespace qkv::js {
namespace {

qkv::SpecialTokens special_tokens(const val& specials) {
  qkv::SpecialTokens s;
  if (specials.isUndefined()) return s;
  if (specials.typeOf().as<std::string>() != "object" || specials.isNull())
    throw_type_error("options.specials must be an object { pad?, bos?, eos?, unk? }, got " + describe(specials));
  bool* fields[4] = {&s.pad, &s.bos, &s.eos, &s.unk};
  const char* names[4] = {"pad", "bos", "eos", "unk"};
  for (int i = 0; i < 4; ++i) {
    const val v = specials[names[i]];
    if (v.isUndefined()) continue;
    if (!v.isTrue() && !v.isFalse())
      throw_type_error(std::string("options.specials.") + names[i] + " must be true or false, got " + describe(v));
    *fields[i] = v.isTrue();
  }
  return s;
}

class JsTokenizer {
 public:
  explicit JsTokenizer(qkv::Tokenizer t) : t_(std::move(t)) {}

  // nullptr (JS null) on error, with the error left for takeError().
  static JsTokenizer* char_level(std::string text, val specials) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::char_level(text, special_tokens(specials))); });
  }
  static JsTokenizer* byte_level(val specials) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::byte_level(special_tokens(specials))); });
  }
  static JsTokenizer* word_level(std::string text, int max_vocab, val specials, bool lowercase) {
    return guarded([&] {
      return new JsTokenizer(qkv::Tokenizer::word_level(text, max_vocab, special_tokens(specials), lowercase));
    });
  }
  static JsTokenizer* from_vocab_merges(std::string vocab, std::string merges) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::from_vocab_merges(vocab, merges)); });
  }
  // special_tokens: an array of strings (the package checked the types).
  static JsTokenizer* train_bpe(std::string text, int vocab_size, val special_tokens, bool add_prefix_space) {
    return guarded([&] {
      qkv::BpeTrainOptions o;
      o.special_tokens = emscripten::vecFromJSArray<std::string>(special_tokens);
      o.add_prefix_space = add_prefix_space;
      return new JsTokenizer(qkv::Tokenizer::train_bpe(text, vocab_size, o));
    });
  }
  static JsTokenizer* from_json(std::string json) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::from_json(json)); });
  }

  std::string to_json() const { return t_.to_json(); }
  // `text` arrives as its UTF-8 bytes (a JS string, or a Uint8Array of raw bytes).
  val encode(std::string text, bool add_bos, bool add_eos, bool split_special) const {
    return guarded([&] { return to_js(t_.encode(text, add_bos, add_eos, split_special)); });
  }
  // The decoded bytes: the JS side reads them as UTF-8 (a byte tokenizer may decode to any bytes).
  val decode(val ids, bool skip_special) const {
    return guarded([&] {
      const std::string text = t_.decode(int32_array(ids, "ids"), skip_special);
      return to_js(std::vector<uint8_t>(text.begin(), text.end()));
    });
  }
  // kind, size, the special ids (-1: absent), lowercase, and every token's bytes in id order.
  val info() const {
    val out = val::object();
    out.set("kind", t_.kind());
    out.set("size", t_.size());
    out.set("padId", t_.pad_id());
    out.set("bosId", t_.bos_id());
    out.set("eosId", t_.eos_id());
    out.set("unkId", t_.unk_id());
    out.set("lowercase", t_.lowercase());
    val vocab = val::array();
    for (const std::string& t : t_.vocabulary())
      vocab.call<void>("push", to_js(std::vector<uint8_t>(t.begin(), t.end())));
    out.set("vocabulary", vocab);
    return out;
  }

 private:
  qkv::Tokenizer t_;
};
}  // namespace
}  // namespace qkv::js

using namespace qkv::js;

EMSCRIPTEN_BINDINGS(qkv_tokenizer) {
  using emscripten::allow_raw_pointers;
  emscripten::class_<JsTokenizer>("Tokenizer")
      .class_function("charLevel", &JsTokenizer::char_level, allow_raw_pointers())
      .class_function("byteLevel", &JsTokenizer::byte_level, allow_raw_pointers())
      .class_function("wordLevel", &JsTokenizer::word_level, allow_raw_pointers())
      .class_function("fromJSON", &JsTokenizer::from_json, allow_raw_pointers())
      .class_function("fromVocabMerges", &JsTokenizer::from_vocab_merges, allow_raw_pointers())
      .class_function("trainBpe", &JsTokenizer::train_bpe, allow_raw_pointers())
      .function("toJSON", &JsTokenizer::to_json)
      .function("encode", &JsTokenizer::encode)
      .function("decode", &JsTokenizer::decode)
      .function("info", &JsTokenizer::info);
}
