// The qkv tool's data-file readers (tsv.h).
#include "tsv.h"

#include <algorithm>
#include <sstream>

#include "qkv/error.h"

namespace qkv::cli {

size_t invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= s.size()) return i;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    i += static_cast<size_t>(n) + 1;
  }
  return std::string_view::npos;
}

void check_text(const std::string& path, const std::string& text, const char* expected) {
  check(!text.empty(), path, ": the file is empty: expected ", expected);
  const size_t bad = invalid_utf8(text);
  if (bad != std::string_view::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    throw Error(detail::cat(path, ":", line, ": invalid UTF-8 at byte ", bad,
                            " (a truncated or binary file?): expected ", expected, " in UTF-8"));
  }
}

std::vector<Row> read_tsv(const std::string& path, const std::string& text, const char* first, const char* second) {
  const std::string expected = std::string("lines of ") + first + "<TAB>" + second;
  check_text(path, text, expected.c_str());
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const auto where = [&] { return detail::cat(path, ":", number, ": "); };
    const size_t tab = line.find('\t');
    const std::string shown = line.size() > 60 ? line.substr(0, 60) + "..." : line;
    check(tab != std::string::npos, where(), "no tab in \"", shown, "\": expected ", first, "<TAB>", second);
    check(line.find('\t', tab + 1) == std::string::npos, where(), "more than one tab in \"", shown, "\": expected ",
          first, "<TAB>", second);
    Row r{number, line.substr(0, tab), line.substr(tab + 1)};
    check(!r.first.empty(), where(), "the ", first, " is empty: expected ", first, "<TAB>", second);
    check(!r.second.empty(), where(), "the ", second, " is empty: expected ", first, "<TAB>", second);
    rows.push_back(std::move(r));
  }
  check(!rows.empty(), path, ": no examples: expected ", expected);
  return rows;
}

}  // namespace qkv::cli
