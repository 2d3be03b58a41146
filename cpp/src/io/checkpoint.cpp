#include "io/checkpoint.h"

#include <deque>
#include <exception>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "io/checksum.h"
#include "io/import.h"
#include "qkv/config.h"
#include "qkv/error.h"

namespace qkv::io {
namespace {

const char* const kM = "optimizer.m.";
const char* const kV = "optimizer.v.";

std::string shape_text(std::span<const int64_t> s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

std::vector<uint8_t> save_checkpoint(models::ModelCore& core, const char* kind, const std::string& config_json,
                                     bool with_optimizer, const std::map<std::string, std::string>& extra) {
  std::vector<TensorRef> refs;
  std::vector<std::string> names;
  // A model on another device is read through the host (one copy of what is saved): the same bytes either way.
  std::deque<std::vector<float>> host;
  const auto on_host = [&](Span x) -> CSpan {
    if (core.device() == Device::CPU) return x;
    host.emplace_back(x.size());
    core.ops().download(host.back().data(), x.data(), x.size_bytes());
    return host.back();
  };
  check(!with_optimizer || !core.params.moments_sharded(),
        "the Adam moments are sharded across ranks (ZeRO-1): gather them before saving the optimizer state");
  for (nn::Param& p : core.params.all()) {
    refs.emplace_back(p.name, p.shape, on_host(p.value));
    if (with_optimizer) {
      refs.emplace_back(kM + p.name, p.shape, on_host(p.m));
      refs.emplace_back(kV + p.name, p.shape, on_host(p.v));
    }
  }
  std::map<std::string, std::string> meta = {
      {"qkv.model", kind},
      {"qkv.config", config_json},
      {"qkv.optimizer", to_json(core.optimizer.config())},
      {"qkv.step", std::to_string(core.optimizer.steps())},
      {"qkv.skipped_steps", std::to_string(core.optimizer.skipped())},
      {"qkv.passes", std::to_string(core.passes)},
      {"qkv.optimizer_state", with_optimizer ? "true" : "false"},
      {"qkv.version", QKV_VERSION},
      {"format", "pt"},
      {kChecksumKey, ""},  // computed below, once the extra keys are known to be allowed
  };
  // The keys written above are what loading reads and verifies: letting a caller replace one would make a
  // checkpoint that lies about its config or fails its own checksums, so they are refused, not overwritten.
  for (const auto& [key, value] : extra) {
    if (!meta.count(key)) continue;
    std::string reserved;
    for (const auto& [own, unused] : meta) reserved += (reserved.empty() ? "" : ", ") + own;
    throw Error(detail::cat("checkpoint: metadata key \"", key, "\" is reserved: the checkpoint writes it itself (",
                            reserved, "); use another key"));
  }
  meta[kChecksumKey] = checksum_metadata(refs);
  meta.insert(extra.begin(), extra.end());
  return serialize_safetensors(refs, meta);
}

Checkpoint read_checkpoint(std::span<const uint8_t> bytes, const char* kind) {
  Checkpoint c;
  c.file = parse_safetensors(bytes);
  verify_checksums(c.file);
  const auto& meta = c.file.metadata;
  const auto it = meta.find("qkv.model");
  if (it == meta.end()) {
    // A state dict as PyTorch saved it: its config is what its shapes and format fix.
    std::string format;
    try {
      format = detect_format(c.file);
    } catch (const Error&) {
    }
    check(!format.empty() && format != "qkv", "checkpoint: the file has no \"qkv.model\" metadata: expected a qkv ",
          "checkpoint of a ", kind, " (a plain safetensors file of weights can be loaded with load_weights)");
    std::string of;
    c.config_json = imported_config(c.file, format, of);
    check(of == kind, "checkpoint: the file is a ", format, " state dict of a ", of, ", expected a ", kind);
    c.format = format;
    return c;
  }
  check(it->second == kind, "checkpoint: the file holds a ", it->second, ", expected a ", kind);
  for (const char* key : {"qkv.config", "qkv.optimizer", "qkv.step"})
    check(meta.count(key), "checkpoint: the metadata has no \"", key, "\"");
  c.config_json = meta.at("qkv.config");
  c.optimizer = optimizer_config_from_json(meta.at("qkv.optimizer"));
  try {
    c.step = std::stoi(meta.at("qkv.step"));
    c.passes = meta.count("qkv.passes") ? std::stoull(meta.at("qkv.passes")) : 0;
  } catch (const std::exception&) {
    throw Error("checkpoint: \"qkv.step\" = \"" + meta.at("qkv.step") + "\" is not a step count");
  }
  check(c.step >= 0, "checkpoint: \"qkv.step\" = ", c.step, " is invalid: expected >= 0");
  // Absent in checkpoints written before NonFinite::Skip existed: none were skipped.
  if (meta.count("qkv.skipped_steps")) {
    const std::string& text = meta.at("qkv.skipped_steps");
    size_t used = 0;
    try {
      c.skipped = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used > 0 && used == text.size() && c.skipped >= 0, "checkpoint: \"qkv.skipped_steps\" = \"", text,
          "\" is invalid: expected an integer >= 0");
  }
  c.has_optimizer_state = meta.count("qkv.optimizer_state") && meta.at("qkv.optimizer_state") == "true";
  return c;
}

namespace {

// Checks everything first, then copies: a bad file changes nothing, and its error names every missing,
// mis-shaped and left-over tensor at once. with_moments: the file must hold the Adam moments too, and they
// are restored.
void restore(models::ModelCore& core, const SafetensorsFile& file, bool with_moments) {
  check(!with_moments || !core.params.moments_sharded(),
        "the Adam moments are sharded across ranks (ZeRO-1): load the checkpoint before joining the group");
  std::set<std::string> expected;
  std::vector<std::string> problems;
  for (nn::Param& p : core.params.all()) {
    std::vector<std::string> keys = {p.name};
    if (with_moments) keys.insert(keys.end(), {kM + p.name, kV + p.name});
    for (const auto& key : keys) {
      expected.insert(key);
      if (!file.contains(key)) {
        problems.push_back(detail::cat("tensor \"", key, "\" is missing"));
        continue;
      }
      const TensorEntry& t = file.at(key);
      if (t.shape != p.shape)
        problems.push_back(
            detail::cat("tensor \"", key, "\" has shape ", shape_text(t.shape), ", expected ", shape_text(p.shape)));
      else if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16" && t.dtype != "F64")
        problems.push_back(detail::cat("tensor \"", key, "\" has dtype ", t.dtype,
                                       ", expected a floating-point dtype (F32, F16, BF16 or F64)"));
    }
  }
  for (const auto& t : file.tensors) {
    const bool moment = t.name.rfind(kM, 0) == 0 || t.name.rfind(kV, 0) == 0;
    if (!expected.count(t.name) && !(moment && !with_moments))
      problems.push_back(detail::cat("tensor \"", t.name, "\" is not a parameter of this model"));
  }
  if (!problems.empty()) {
    std::string msg = "checkpoint: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw Error(msg + " (the file does not match this model's config)");
  }
  for (nn::Param& p : core.params.all()) {
    const auto copy = [&](const std::string& key, Span dst) {
      const auto v = file.floats(key);
      core.ops().upload(dst.data(), v.data(), v.size() * sizeof(float));
    };
    copy(p.name, p.value);
    if (with_moments) {
      copy(kM + p.name, p.m);
      copy(kV + p.name, p.v);
    }
  }
}

std::vector<Target> targets_of(models::ModelCore& core) {
  std::vector<Target> t;
  for (nn::Param& p : core.params.all()) t.push_back({p.name, p.shape});
  return t;
}

}  // namespace

void restore_checkpoint(models::ModelCore& core, const Checkpoint& c) {
  if (c.format != "qkv") {
    // heads: seed 004's, which its config holds; the other formats' mappings do not use them.
    const std::vector<Target> targets = targets_of(core);
    const auto config = nlohmann::json::parse(c.config_json);
    restore(core, map_weights(c.file, c.format, kind_of(targets), targets, config.value("heads", 0)), false);
  } else {
    restore(core, c.file, c.has_optimizer_state);
  }
  core.optimizer.set_steps(c.has_optimizer_state ? c.step : 0);
  core.optimizer.set_skipped(c.has_optimizer_state ? c.skipped : 0);
  core.passes = c.passes;
}

void restore_weights(models::ModelCore& core, std::span<const uint8_t> bytes, const std::string& config_json) {
  const SafetensorsFile file = parse_safetensors(bytes);
  verify_checksums(file);
  std::string format = "qkv";
  try {
    format = detect_format(file);
  } catch (const Error&) {
    // Names of no known format: reported below as qkv's (every missing and left-over tensor).
  }
  const int heads = nlohmann::json::parse(config_json).at("heads").get<int>();
  const std::vector<Target> targets = targets_of(core);
  if (format != "qkv") {
    restore(core, map_weights(file, format, kind_of(targets), targets, heads), false);
    return;
  }
  try {
    restore(core, file, false);
  } catch (const Error&) {
    // qkv's names are nn.Transformer's, so a torch state dict can look like them (a bare nn.TransformerEncoder's
    // "layers.N" under a Classifier's "encoder.layers.N"): try that before reporting the qkv names' problems.
    if (file.metadata.count("qkv.model")) throw;
    const std::exception_ptr first = std::current_exception();
    try {
      restore(core, map_weights(file, "torch", kind_of(targets), targets, heads), false);
    } catch (const Error&) {
      std::rethrow_exception(first);
    }
  }
}

void check_same_config(const std::string& model_json, const std::string& checkpoint_json) {
  const auto a = nlohmann::json::parse(model_json), b = nlohmann::json::parse(checkpoint_json);
  const bool imported = !b.contains("seed");  // a foreign state dict's config: only what it fixes (above)
  for (const auto& [key, value] : a.items()) {
    if (key == "seed" || key == "dropout") continue;  // neither changes the weights' meaning
    if (imported && !b.contains(key)) continue;
    check(b.contains(key) && b.at(key) == value, "checkpoint: config field \"", key, "\" is ",
          b.contains(key) ? b.at(key).dump() : std::string("missing"), " in the checkpoint but ", value.dump(),
          " in this model");
  }
}

void save_file(const std::string& path, const std::vector<uint8_t>& bytes) { write_safetensors_atomic(path, bytes); }

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open \"", path, "\" for reading");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace qkv::io
