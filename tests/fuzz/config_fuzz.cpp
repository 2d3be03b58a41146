// Fuzzes the JSON config readers (the three model configs and the optimizer config). Contract: any text
// ends in a config or in qkv::Error; a config that was read writes JSON that reads back to the same JSON.
#include <cstdint>
#include <string>
#include <string_view>

#include "qkv/config.h"
#include "qkv/error.h"

namespace {

template <class Parse>
void round_trip(std::string_view text, Parse parse) {
  std::string written;
  try {
    written = qkv::to_json(parse(text));
  } catch (const qkv::Error&) {
    return;
  }
  // What the library writes it must read back, unchanged (a checkpoint stores this JSON).
  if (qkv::to_json(parse(written)) != written) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  round_trip(text, qkv::language_model_config_from_json);
  round_trip(text, qkv::seq2seq_config_from_json);
  round_trip(text, qkv::classifier_config_from_json);
  round_trip(text, qkv::optimizer_config_from_json);
  return 0;
}
