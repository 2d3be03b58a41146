// LoraOptions: validation, and the "rank=8,alpha=16,..." string of the CLI's --lora (qkv/lora.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "models/lora_set.h"
#include "qkv/error.h"
#include "qkv/lora.h"

namespace qkv {

namespace models {

const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names{"q", "k", "v", "qkv", "out", "up", "down", "head"};
  return names;
}

void check_lora_options(const LoraOptions& o) {
  check(o.rank >= 1 && o.rank <= kMaxLoraRank, "lora rank = ", o.rank, " is invalid: expected an integer from 1 to ",
        kMaxLoraRank);
  check(std::isfinite(o.alpha) && o.alpha > 0.f, "lora alpha = ", o.alpha, " is invalid: expected a finite number > 0");
  check(o.dropout >= 0.f && o.dropout < 1.f, "lora dropout = ", o.dropout, " is invalid: expected 0 <= dropout < 1");
  check(!o.targets.empty(), "lora targets is empty: expected one or more of q, k, v, qkv, out, up, down, head");
  bool qkv = false, part = false;
  for (size_t i = 0; i < o.targets.size(); ++i) {
    const std::string& t = o.targets[i];
    bool known = false;
    for (const std::string& n : lora_target_names()) known = known || n == t;
    check(known, "lora targets[", i, "] = \"", t,
          "\" is not a target: expected one of q, k, v, qkv, out, up, down, head");
    for (size_t j = 0; j < i; ++j)
      check(o.targets[j] != t, "lora targets: \"", t, "\" is given twice: expected each target at most once");
    qkv = qkv || t == "qkv";
    part = part || t == "q" || t == "k" || t == "v";
  }
  check(!(qkv && part),
        "lora targets: \"qkv\" adapts the whole in-projection, which \"q\", \"k\" and \"v\" are rows "
        "of: give either qkv or q/k/v, not both");
}

}  // namespace models

namespace {
// The shortest %g form that reads back as the same float.
std::string float_string(float x) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

float parse_float(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const float x = std::strtof(value.c_str(), &end);
  check(!value.empty() && end == value.c_str() + value.size(), "--lora: ", key, "=", value,
        " is not a number: expected e.g. ", key, "=", key == "alpha" ? "16" : "0.05");
  return x;
}

long long parse_int(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const long long x = std::strtoll(value.c_str(), &end, 10);
  check(!value.empty() && end == value.c_str() + value.size(), "--lora: ", key, "=", value,
        " is not an integer: expected e.g. ", key, "=8");
  return x;
}
}  // namespace

LoraOptions lora_options_from_string(const std::string& spec) {
  LoraOptions o;
  std::vector<std::string> seen;
  size_t at = 0;
  while (at <= spec.size()) {
    size_t comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(at, comma - at);
    at = comma + 1;
    if (item.empty()) {
      check(spec.empty(), "--lora \"", spec, "\": an empty item: expected key=value pairs joined with ','");
      break;
    }
    const size_t eq = item.find('=');
    check(eq != std::string::npos, "--lora: \"", item, "\" is not key=value: expected e.g. rank=8");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    for (const std::string& k : seen) check(k != key, "--lora: ", key, " is given twice");
    seen.push_back(key);
    if (key == "rank") {
      const long long r = parse_int(key, value);
      check(r >= 1 && r <= kMaxLoraRank, "lora rank = ", value, " is invalid: expected an integer from 1 to ",
            kMaxLoraRank);
      o.rank = static_cast<int>(r);
    } else if (key == "alpha") {
      o.alpha = parse_float(key, value);
    } else if (key == "dropout") {
      o.dropout = parse_float(key, value);
    } else if (key == "seed") {
      check(!value.empty() && value[0] != '-', "--lora: seed=", value, " is invalid: expected an integer >= 0");
      char* end = nullptr;
      o.seed = std::strtoull(value.c_str(), &end, 10);
      check(end == value.c_str() + value.size(), "--lora: seed=", value, " is invalid: expected an integer >= 0");
    } else if (key == "targets") {
      o.targets.clear();
      size_t t = 0;
      while (t <= value.size()) {
        size_t plus = value.find('+', t);
        if (plus == std::string::npos) plus = value.size();
        o.targets.push_back(value.substr(t, plus - t));
        t = plus + 1;
      }
    } else {
      throw Error(detail::cat("--lora: unknown key \"", key, "\": expected rank, alpha, dropout, targets or seed"));
    }
  }
  models::check_lora_options(o);
  return o;
}

std::string to_string(const LoraOptions& o) {
  std::string targets;
  for (const std::string& t : o.targets) targets += (targets.empty() ? "" : "+") + t;
  return detail::cat("rank=", o.rank, ",alpha=", float_string(o.alpha), ",dropout=", float_string(o.dropout),
                     ",targets=", targets, ",seed=", o.seed);
}

}  // namespace qkv
