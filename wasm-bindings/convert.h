#pragma once
// What every binding file shares: JS values to the core's types and back, and the error channel. A C++
// exception never crosses into JS through wasm frames (that would skip destructors and leak): every bound
// entry point runs its body in guarded(), which records the error for takeError() (runtime.cpp) and returns
// an empty value; the JS side (web/src/core.ts) then throws it.
#include <emscripten/bind.h>
#include <emscripten/val.h>

#include <cstdint>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "qkv/language_model.h"

namespace qkv::js {

using emscripten::val;

// A JS argument of the wrong type: becomes a JS TypeError (everything else a JS Error).
struct TypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The error of the last call that failed, taken by takeError().
struct LastError {
  std::string message;
  bool type_error = false;
  bool set = false;
};
LastError& last_error();

template <class F>
auto guarded(F&& f) -> decltype(f()) {
  using R = decltype(f());
  try {
    return f();
  } catch (const TypeError& e) {
    last_error() = {e.what(), true, true};
  } catch (const std::bad_alloc&) {
    last_error() = {"out of memory: the wasm heap could not grow (it is limited to 4 GiB)", false, true};
  } catch (const std::exception& e) {
    last_error() = {e.what(), false, true};
  }
  if constexpr (std::is_same_v<R, val>) {
    return val::undefined();
  } else if constexpr (!std::is_void_v<R>) {
    return R{};
  }
}

// { message, typeError } of the last failed call, or undefined; clears it.
val take_error();
[[noreturn]] void throw_type_error(const std::string& message);
// A JS value for an error message: `"abc" (a string)`, `1.5 (a number)`, `an Array`, `null`.
std::string describe(const val& v);

std::vector<int32_t> int32_array(const val& v, const char* name);
std::vector<uint8_t> uint8_array(const val& v, const char* name);
// A plain object of string values (save's metadata) as the core's map. Values must be strings already
// (web/src/validate.ts checks and names them for the user): this only refuses what it cannot convert.
std::map<std::string, std::string> string_map(const val& v, const char* name);

// Fresh JS typed arrays holding a copy of `data` (slice() copies out of the heap into an ordinary buffer).
val to_js(const std::vector<float>& data);
val to_js(const std::vector<int32_t>& data);
val to_js(const std::vector<uint8_t>& data);
val to_js(const qkv::Metrics& m);
val to_js(const qkv::MemoryUsage& m);

}  // namespace qkv::js
