#pragma once
// The qkv tool's data-file readers: UTF-8 text checks and the TSV examples of the seq2seq and classifier
// tasks. They read user files, so they are fuzzed (tests/fuzz/tsv_fuzz.cpp): any input ends in rows or in
// a qkv::Error naming file:line, never in a crash.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::cli {

// The byte offset of the first malformed UTF-8 sequence, or npos. (The tokenizer checks more strictly;
// this is to name the line of a truncated or binary file.)
size_t invalid_utf8(std::string_view s);

// qkv::Error naming `path` (and the line) when `text` is empty or not UTF-8; `expected` says what should be there.
void check_text(const std::string& path, const std::string& text, const char* expected);

// One TSV example: its line number and its two fields.
struct Row {
  int line;
  std::string first, second;
};

// Lines `first<TAB>second`; blank lines are skipped. qkv::Error naming path:line for a line without exactly
// one tab or with an empty field, and for a file with no examples.
std::vector<Row> read_tsv(const std::string& path, const std::string& text, const char* first, const char* second);

}  // namespace qkv::cli
