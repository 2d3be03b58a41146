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

// The Error of logits() and evaluate() when an output is not finite (weights that overflow or hold NaN): a type of its
// own, so that a training loop can tell it from bad input (qkv train saves no checkpoint then, or goes on under
// --non-finite skip).
class NonFiniteError : public Error {
 public:
  using Error::Error;
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
