// Configs and generation options across the boundary (config.h).
#include "config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace qkv::js {

// The shortest decimal that reads back as this float: 1e-3f shows as 0.001, not 0.0010000000474974513.
double shortest(float f) {
  char buf[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return f;
}

qkv::SamplingOptions sampling_options(const val& options) {
  if (options.typeOf().as<std::string>() != "object" || options.isNull())
    throw_type_error("options must be an object, got " + describe(options));
  qkv::SamplingOptions s;
  const auto number = [&](const char* key) -> std::optional<double> {
    const val v = options[key];
    if (v.isUndefined()) return std::nullopt;
    if (!v.isNumber()) throw_type_error(std::string("options.") + key + " must be a number, got " + describe(v));
    return v.as<double>();
  };
  const auto integer = [&](const char* key) -> std::optional<double> {
    const auto v = number(key);
    if (v && (*v != std::floor(*v) || std::abs(*v) > 9007199254740991.0))
      throw_type_error(std::string("options.") + key + " must be an integer, got " + describe(options[key]));
    return v;
  };
  if (auto v = integer("maxTokens")) s.max_new_tokens = static_cast<int>(std::clamp(*v, -1.0, 2147483647.0));
  if (auto v = number("temperature")) s.temperature = static_cast<float>(*v);
  if (auto v = integer("topK")) s.top_k = static_cast<int>(std::clamp(*v, -1.0, 2147483647.0));
  if (auto v = number("topP")) s.top_p = static_cast<float>(*v);
  if (auto v = number("repetitionPenalty")) s.repetition_penalty = static_cast<float>(*v);
  if (auto v = integer("seed")) {
    if (*v < 0) throw_type_error("options.seed must be an integer >= 0, got " + describe(options["seed"]));
    s.seed = static_cast<uint64_t>(*v);
  }
  const val stop = options["stopTokens"];
  if (!stop.isUndefined()) s.stop_tokens = int32_array(stop, "options.stopTokens");
  const val cache = options["useCache"];
  if (!cache.isUndefined()) {
    if (!cache.isTrue() && !cache.isFalse())
      throw_type_error("options.useCache must be true or false, got " + describe(cache));
    s.use_cache = cache.isTrue();
  }
  return s;
}

qkv::AttentionKind attention_kind(const std::string& kind) {
  if (kind == "encoder") return qkv::AttentionKind::EncoderSelf;
  if (kind == "decoder") return qkv::AttentionKind::DecoderSelf;
  if (kind == "cross") return qkv::AttentionKind::Cross;
  throw_type_error("kind = \"" + kind + "\" is unknown: expected \"encoder\", \"decoder\" or \"cross\"");
}
}  // namespace qkv::js
