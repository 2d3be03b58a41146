// JS values to the core's types and back, and the error channel (convert.h).
#include "convert.h"

#include <string>

namespace qkv::js {

LastError& last_error() {
  static LastError e;
  return e;
}

namespace {

// "a Float32Array", "an Array".
std::string article(const std::string& name) {
  const bool vowel = !name.empty() && std::string("aeiouAEIOU").find(name[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + name;
}

}  // namespace

// { message, typeError } of the last failed call, or undefined; clears it.
val take_error() {
  if (!last_error().set) return val::undefined();
  val out = val::object();
  out.set("message", last_error().message);
  out.set("typeError", last_error().type_error);
  last_error() = {};
  return out;
}

[[noreturn]] void throw_type_error(const std::string& message) { throw TypeError(message); }

// A JS value for an error message: `"abc" (a string)`, `1.5 (a number)`, `an Array`, `null`.
std::string describe(const val& v) {
  if (v.isNull()) return "null";
  if (v.isUndefined()) return "undefined";
  const std::string type = v.typeOf().as<std::string>();
  if (type == "string") {
    std::string s = v.as<std::string>();
    if (s.size() > 20) s = s.substr(0, 20) + "...";
    return val::global("JSON").call<std::string>("stringify", val(s)) + " (a string)";
  }
  if (type == "number" || type == "boolean" || type == "bigint")
    return val::global("String")(v).as<std::string>() + " (a " + type + ")";
  if (type == "object") {
    const val ctor = v["constructor"];
    if (!ctor.isUndefined() && !ctor.isNull() && ctor["name"].isString())
      return article(ctor["name"].as<std::string>());
    return "an object";
  }
  return article(type);
}

std::vector<int32_t> int32_array(const val& v, const char* name) {
  if (!v.instanceof (val::global("Int32Array")))
    throw_type_error(std::string(name) + " must be an Int32Array, got " + describe(v));
  return emscripten::convertJSArrayToNumberVector<int32_t>(v);
}

std::vector<uint8_t> uint8_array(const val& v, const char* name) {
  if (!v.instanceof (val::global("Uint8Array")))
    throw_type_error(std::string(name) + " must be a Uint8Array, got " + describe(v));
  return emscripten::convertJSArrayToNumberVector<uint8_t>(v);
}

// A plain object of string values (save's metadata) as the core's map. Values must be strings already
// (web/src/validate.ts checks and names them for the user): this only refuses what it cannot convert.
std::map<std::string, std::string> string_map(const val& v, const char* name) {
  std::map<std::string, std::string> out;
  if (v.isUndefined() || v.isNull()) return out;
  if (v.typeOf().as<std::string>() != "object")
    throw_type_error(std::string(name) + " must be an object of string values, got " + describe(v));
  const val keys = val::global("Object").call<val>("keys", v);
  const int n = keys["length"].as<int>();
  for (int i = 0; i < n; ++i) {
    const std::string key = keys[i].as<std::string>();
    const val value = v[key];
    if (!value.isString())
      throw_type_error(std::string(name) + "[\"" + key + "\"] must be a string, got " + describe(value));
    out.emplace(key, value.as<std::string>());
  }
  return out;
}

// Fresh JS typed arrays holding a copy of `data` (slice() copies out of the heap into an ordinary buffer).
val to_js(const std::vector<float>& data) {
  return val(emscripten::typed_memory_view(data.size(), data.data())).call<val>("slice");
}
val to_js(const std::vector<int32_t>& data) {
  return val(emscripten::typed_memory_view(data.size(), data.data())).call<val>("slice");
}
val to_js(const std::vector<uint8_t>& data) {
  return val(emscripten::typed_memory_view(data.size(), data.data())).call<val>("slice");
}

val to_js(const qkv::Metrics& m) {
  val out = val::object();
  out.set("loss", m.loss);
  out.set("accuracy", m.accuracy);
  out.set("perplexity", m.perplexity);
  out.set("count", static_cast<double>(m.count));
  return out;
}

val to_js(const qkv::MemoryUsage& m) {
  val out = val::object();
  out.set("parameters", static_cast<double>(m.parameters));
  out.set("gradients", static_cast<double>(m.gradients));
  out.set("optimizer", static_cast<double>(m.optimizer));
  out.set("activations", static_cast<double>(m.activations));
  out.set("total", static_cast<double>(m.total()));
  return out;
}

}  // namespace qkv::js
