// Fuzzes the tokenizers: their JSON form (from_json, qkv's or a Hugging Face tokenizer.json) and the char,
// byte, word and BPE tokenizers built from and run on arbitrary text. Contract: any input ends in a result or
// in qkv::Error; a tokenizer that was read writes JSON that reads back to the same JSON, byte tokens round
// trip any bytes, and a BPE trained on a text decodes its encoding back to the text.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"

namespace {

void exercise(const qkv::Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, tok.bos_id() >= 0, tok.eos_id() >= 0);
  } catch (const qkv::Error&) {
    return;
  }
  (void)tok.decode(ids, true);
  (void)tok.decode(ids, false);
  const std::string json = tok.to_json();
  if (qkv::Tokenizer::from_json(json).to_json() != json) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks what the rest is: a tokenizer's JSON, or the text a tokenizer is built from.
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const qkv::SpecialTokens specials{(mode & 0x10) != 0, (mode & 0x20) != 0, (mode & 0x40) != 0, (mode & 0x80) != 0};
  try {
    switch (mode % 5) {
      case 0: exercise(qkv::Tokenizer::from_json(text), text.substr(text.size() / 2)); break;
      case 1: exercise(qkv::Tokenizer::char_level(text, specials), text); break;
      case 2: {
        const qkv::Tokenizer tok = qkv::Tokenizer::byte_level(specials);
        const std::vector<int32_t> ids = tok.encode(text);
        if (tok.decode(ids) != text) __builtin_trap();  // bytes round trip, whatever they are
        exercise(tok, text);
        break;
      }
      case 3:
        exercise(qkv::Tokenizer::word_level(text, 4 + (mode >> 2) % 64, specials, (mode & 0x8) != 0), text);
        break;
      case 4: {
        const qkv::Tokenizer tok = qkv::Tokenizer::train_bpe(text, 257 + (mode >> 3) % 32);
        if (tok.decode(tok.encode(text), false) != text) __builtin_trap();  // every byte has a token
        exercise(tok, text);
        break;
      }
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
