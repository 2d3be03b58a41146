// JSON <-> configuration structs, with nlohmann-json. One table of fields per struct drives both
// directions, so a new field is one line.
#include "qkv/config.h"

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "qkv/error.h"

namespace qkv {
namespace {

using nlohmann::json;

const char* type_name(const json& v) { return v.type_name(); }
// What a field holds, for a message: `string "abc"`, `number 1.5`, or `null` (its type and its text are one word).
std::string got(const json& v) { return v.is_null() ? std::string("null") : detail::cat(v.type_name(), " ", v.dump()); }

// One field: its key, whether it must be present, and how to write and read it.
template <class C>
struct Field {
  const char* key;
  bool required;
  std::function<json(const C&)> get;
  std::function<void(C&, const json&, const std::string&)> set;
};

int as_int(const json& v, const std::string& where) {
  // A float such as 64.0 counts when it is whole. Its range is checked before any cast: casting 1e300 to an
  // integer is undefined behaviour (found by tests/fuzz/config_fuzz).
  const bool whole_float = v.is_number_float() && std::isfinite(v.get<double>()) &&
                           std::abs(v.get<double>()) < 0x1p62 && v.get<double>() == std::floor(v.get<double>());
  check(v.is_number_integer() || whole_float, where, " must be an integer, got ", got(v));
  check(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max()), where,
        " = ", v.dump(), " is out of range for a 32-bit integer");
  const auto i = v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
  check(i >= std::numeric_limits<int>::min() && i <= std::numeric_limits<int>::max(), where, " = ", i,
        " is out of range for a 32-bit integer");
  return static_cast<int>(i);
}
float as_float(const json& v, const std::string& where) {
  check(v.is_number(), where, " must be a number, got ", got(v));
  // Narrowing a double beyond float's range is undefined behaviour: refuse it with the value instead.
  const double d = v.get<double>();
  check(std::abs(d) <= static_cast<double>(std::numeric_limits<float>::max()), where, " = ", v.dump(),
        " is out of range for a 32-bit float");
  return static_cast<float>(d);
}
bool as_bool(const json& v, const std::string& where) {
  check(v.is_boolean(), where, " must be true or false, got ", got(v));
  return v.get<bool>();
}
std::string as_string(const json& v, const std::string& where) {
  check(v.is_string(), where, " must be a string, got ", got(v));
  return v.get<std::string>();
}
uint64_t as_seed(const json& v, const std::string& where) {
  check(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), where,
        " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

#define QKV_INT(C, f, req)                                                                                             \
  Field<C> {                                                                                                           \
#f, req, [](const C& c) { return json(c.f); },                                                                     \
                                                [](C & c, const json& v, const std::string& w) { c.f = as_int(v, w); } \
  }
#define QKV_FLOAT(C, f)                                                                                                \
  Field<C> {                                                                                                           \
#f, false,                                                                                                         \
        [](const C& c) { return json(c.f); }, [](C & c, const json& v, const std::string& w) { c.f = as_float(v, w); } \
  }
#define QKV_BOOL(C, f)                                                                                                \
  Field<C> {                                                                                                          \
#f, false,                                                                                                        \
        [](const C& c) { return json(c.f); }, [](C & c, const json& v, const std::string& w) { c.f = as_bool(v, w); } \
  }
#define QKV_SEED(C)                                                               \
  Field<C> {                                                                      \
    "seed", false, [](const C& c) { return json(c.seed); },                       \
        [](C& c, const json& v, const std::string& w) { c.seed = as_seed(v, w); } \
  }
#define QKV_ENUM(C, f, parse)                                                                                          \
  Field<C> {                                                                                                           \
#f, false, [](const C& c) { return json(to_string(c.f)); }, [](C & c, const json& v,                               \
                                                                   const std::string&                                  \
                                                                       w) { c.f = parse(as_string(v, w), w.c_str()); } \
  }

template <class C>
std::string write(const C& c, const std::vector<Field<C>>& fields) {
  json j = json::object();
  for (const auto& f : fields) j[f.key] = f.get(c);
  return j.dump();
}

template <class C>
C read(std::string_view text, const char* what, const std::vector<Field<C>>& fields) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(detail::cat(what, " JSON is not valid JSON: ", e.what()));
  }
  check(j.is_object(), what, " JSON must be an object, got ", type_name(j));
  std::set<std::string> known;
  C c;
  for (const auto& f : fields) {
    known.insert(f.key);
    const std::string where = std::string(what) + "." + f.key;
    if (!j.contains(f.key)) {
      check(!f.required, where, " is missing: it is required");
      continue;
    }
    f.set(c, j.at(f.key), where);
  }
  for (const auto& [key, value] : j.items()) {
    if (known.count(key)) continue;
    std::string names;
    for (const auto& f : fields) names += (names.empty() ? "" : ", ") + std::string(f.key);
    throw Error(detail::cat(what, " JSON has an unknown field \"", key, "\": expected one of ", names));
  }
  return c;
}

template <class C>
std::vector<Field<C>> transformer_fields() {
  return {QKV_INT(C, context, true),
          QKV_INT(C, d_model, true),
          QKV_INT(C, heads, true),
          QKV_INT(C, d_ff, false),
          QKV_SEED(C),
          QKV_ENUM(C, activation, parse_activation),
          QKV_ENUM(C, norm, parse_norm),
          QKV_BOOL(C, bias),
          QKV_FLOAT(C, dropout),
          QKV_ENUM(C, positions, parse_positions),
          QKV_BOOL(C, scale_embedding),
          QKV_BOOL(C, final_norm)};
}

template <class C>
std::vector<Field<C>> with(std::vector<Field<C>> a, std::vector<Field<C>> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<Field<LanguageModelConfig>>& lm_fields() {
  using C = LanguageModelConfig;
  static const auto f =
      with<C>({QKV_INT(C, vocab_size, true), QKV_INT(C, layers, true), QKV_BOOL(C, tie_head)}, transformer_fields<C>());
  return f;
}

const std::vector<Field<Seq2SeqConfig>>& seq2seq_fields() {
  using C = Seq2SeqConfig;
  static const auto f =
      with<C>({QKV_INT(C, src_vocab, true), QKV_INT(C, tgt_vocab, true), QKV_INT(C, encoder_layers, true),
               QKV_INT(C, decoder_layers, true), QKV_INT(C, pad_id, false), QKV_FLOAT(C, label_smoothing)},
              transformer_fields<C>());
  return f;
}

const std::vector<Field<ClassifierConfig>>& classifier_fields() {
  using C = ClassifierConfig;
  static const auto f =
      with<C>({QKV_INT(C, vocab_size, true), QKV_INT(C, layers, true), QKV_INT(C, classes, true),
               QKV_ENUM(C, pooling, parse_pooling), QKV_ENUM(C, head, parse_head), QKV_INT(C, pad_id, false)},
              transformer_fields<C>());
  return f;
}

const std::vector<Field<OptimizerConfig>>& optimizer_fields() {
  using C = OptimizerConfig;
  static const std::vector<Field<C>> f = {QKV_ENUM(C, kind, parse_optimizer_kind),
                                          QKV_FLOAT(C, lr),
                                          QKV_FLOAT(C, beta1),
                                          QKV_FLOAT(C, beta2),
                                          QKV_FLOAT(C, eps),
                                          QKV_FLOAT(C, weight_decay),
                                          QKV_BOOL(C, decay_matrices_only),
                                          QKV_FLOAT(C, grad_clip),
                                          QKV_ENUM(C, schedule, parse_schedule),
                                          QKV_INT(C, warmup_steps, false),
                                          QKV_INT(C, total_steps, false),
                                          QKV_FLOAT(C, min_lr),
                                          QKV_ENUM(C, non_finite, parse_non_finite)};
  return f;
}

}  // namespace

std::string to_json(const LanguageModelConfig& c) { return write(c, lm_fields()); }
std::string to_json(const Seq2SeqConfig& c) { return write(c, seq2seq_fields()); }
std::string to_json(const ClassifierConfig& c) { return write(c, classifier_fields()); }
std::string to_json(const OptimizerConfig& c) { return write(c, optimizer_fields()); }

LanguageModelConfig language_model_config_from_json(std::string_view json) { return read(json, "config", lm_fields()); }
Seq2SeqConfig seq2seq_config_from_json(std::string_view json) { return read(json, "config", seq2seq_fields()); }
ClassifierConfig classifier_config_from_json(std::string_view json) {
  return read(json, "config", classifier_fields());
}
OptimizerConfig optimizer_config_from_json(std::string_view json) {
  OptimizerConfig c = read(json, "optimizer", optimizer_fields());
  validate(c);
  return c;
}

}  // namespace qkv
