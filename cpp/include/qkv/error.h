#pragma once
// qkv::Error: the one exception type the library throws for bad input. Its message names the argument,
// the value received and what was expected, so that a JS caller sees the same text in a rejected promise.
#include <sstream>
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws qkv::Error with the concatenation of `parts` when `ok` is false.
template <class... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) throw Error(detail::cat(parts...));
}

}  // namespace qkv
