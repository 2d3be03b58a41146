// Fuzzes the qkv tool's TSV readers (seq2seq: source<TAB>target, classifier: label<TAB>text) and what
// the tool does next with the rows: char tokenizers of each column, and encoding every field with them.
// Contract: any file ends in examples or in qkv::Error.
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "tsv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<qkv::cli::Row> rows = qkv::cli::read_tsv("fuzz.tsv", text, "source", "target");
    std::string sources, targets;
    for (const auto& r : rows) {
      if (r.first.empty() || r.second.empty() || r.line < 1) __builtin_trap();  // the reader's promise
      sources += r.first;
      targets += r.second;
    }
    const qkv::Tokenizer src = qkv::Tokenizer::char_level(sources);
    const qkv::Tokenizer tgt = qkv::Tokenizer::char_level(targets);
    for (const auto& r : rows) {
      (void)src.encode(r.first, false, true);
      (void)tgt.encode(r.second, true, true);
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
