#include "io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "io/checksum.h"
#include "io/import.h"
#include "models/lora_set.h"
#include "ops/weight_quantize.h"
#include "qkv/config.h"
#include "qkv/error.h"

namespace qkv::io {
namespace {

const char* const kM = "optimizer.m.";
const char* const kV = "optimizer.v.";
const char* const kQuantized = "qkv.quantized";
const char* const kLora = "qkv.lora";
const char* const kActivations = "qkv.activations";  // "int8": Model::set_quant_activations (absent: f32)
const char* const kScales = ".scales";

// How a packed parameter is stored in a file: its rows as they are on the device, under a dtype and shape a
// safetensors reader understands (F16 / BF16 as such where the rows carry no padding), and its scales.
struct Stored {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> scales_shape;  // empty: no scales (F16, BF16)
  std::string scales_dtype;  // Int8's F32 (N, 1); Q4's BF16 (N, 2 ceil(G / 2)): its bfloat16 as the words hold them
};
Stored stored_as(const nn::Param& p) {
  const int N = p.rows(), K = p.cols();
  const auto stride = static_cast<int64_t>(ops::row_stride(p.format, K));
  const int per_row = ops::scales_per_row(p.format, K);
  Stored s;
  switch (p.format) {
    case ops::WeightFormat::Int8: s.dtype = "I8"; break;
    case ops::WeightFormat::F16: s.dtype = stride == 2 * K ? "F16" : "U8"; break;
    case ops::WeightFormat::BF16: s.dtype = stride == 2 * K ? "BF16" : "U8"; break;
    default: s.dtype = "U8"; break;
  }
  s.shape = s.dtype == "F16" || s.dtype == "BF16" ? std::vector<int64_t>{N, K} : std::vector<int64_t>{N, stride};
  if (p.format == ops::WeightFormat::Q4) {
    s.scales_shape = {N, 2 * per_row};
    s.scales_dtype = "BF16";
  } else if (per_row > 0) {
    s.scales_shape = {N, per_row};
    s.scales_dtype = "F32";
  }
  return s;
}

// "qkv.quantized": {"name": {"format": "int8", "shape": [N, K]}, ...}: the format and the matrix's own shape
// (the stored tensor's is the rows' bytes). qkv::Error naming an entry that is not one.
nn::Formats formats_from_json(const std::string& text, std::map<std::string, std::vector<int64_t>>* shapes = nullptr) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::cat("checkpoint: the \"", kQuantized, "\" metadata is not valid JSON (", e.what(), ")"));
  }
  check(j.is_object(), "checkpoint: the \"", kQuantized, "\" metadata is a JSON ", j.type_name(),
        ", expected an object of tensor names to {\"format\", \"shape\"}");
  nn::Formats out;
  for (const auto& [name, value] : j.items()) {
    const nlohmann::json format = value.is_object() && value.contains("format") ? value.at("format") : value;
    for (ops::WeightFormat f :
         {ops::WeightFormat::F16, ops::WeightFormat::BF16, ops::WeightFormat::Int8, ops::WeightFormat::Q4})
      if (format.is_string() && format.get<std::string>() == ops::format_name(f)) out[name] = f;
    check(out.count(name), "checkpoint: \"", kQuantized, "\" gives tensor \"", name, "\" the format ", format.dump(),
          ": expected \"int8\", \"q4\", \"f16\" or \"bf16\"");
    const nlohmann::json shape = value.is_object() ? value.value("shape", nlohmann::json()) : nlohmann::json();
    check(shape.is_array() && shape.size() == 2 && shape[0].is_number_integer() && shape[1].is_number_integer(),
          "checkpoint: \"", kQuantized, "\" gives tensor \"", name, "\" no \"shape\": expected [rows, columns]");
    if (shapes) (*shapes)[name] = shape.get<std::vector<int64_t>>();
  }
  return out;
}

std::string formats_to_json(const nn::Parameters& params) {
  nlohmann::json j = nlohmann::json::object();
  for (const nn::Param& p : params.all())
    if (p.is_packed()) j[p.name] = {{"format", ops::format_name(p.format)}, {"shape", p.shape}};
  return j.dump();
}

// Every scale of a packed tensor must be finite, and int8's >= 0 (max|w| / 127; q4's d = m / -8 has a sign): a
// corrupted file is refused naming the tensor, never turned into NaNs at the first product. `words` are the
// scales as the device holds them (Q4: two bfloat16 a word).
void check_scales(const std::string& name, ops::WeightFormat f, std::span<const float> words) {
  if (f == ops::WeightFormat::Q4) {
    for (size_t i = 0; i < 2 * words.size(); ++i) {
      const uint16_t h = ops::q4_scale_bits(words.data(), static_cast<int>(i));
      check((h & 0x7f80u) != 0x7f80u, "checkpoint: tensor \"", name, "\" is corrupted: scale [", i,
            "] = ", ops::bf16_to_f32(h), ", expected a finite number");
    }
    return;
  }
  for (size_t i = 0; i < words.size(); ++i)
    check(std::isfinite(words[i]) && words[i] >= 0.f, "checkpoint: tensor \"", name, "\" is corrupted: scale [", i,
          "] = ", words[i], ", expected a finite number >= 0");
}

std::string shape_text(std::span<const int64_t> s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

namespace {

// What a checkpoint writes: the tensors (views of the parameters, or of `host` copies for a model on another
// device) and the metadata.
struct ToSave {
  std::vector<TensorRef> refs;
  std::map<std::string, std::string> meta;
  std::deque<std::vector<float>> host;
  std::deque<std::vector<uint8_t>> host_bytes;  // packed rows of a model on another device
};

ToSave to_save(models::ModelCore& core, const char* kind, const std::string& config_json, bool with_optimizer,
               const std::map<std::string, std::string>& extra) {
  ToSave out;
  std::vector<TensorRef>& refs = out.refs;
  // A model on another device is read through the host (one copy of what is saved): the same bytes either way.
  std::deque<std::vector<float>>& host = out.host;
  const auto on_host = [&](Span x) -> CSpan {
    if (core.device() == Device::CPU) return x;
    host.emplace_back(x.size());
    core.ops().download(host.back().data(), x.data(), x.size_bytes());
    return host.back();
  };
  check(!with_optimizer || !core.trained().moments_sharded(),
        "the Adam moments are sharded across ranks (ZeRO-1): gather them before saving the optimizer state");
  // The optimizer state is what trains: the adapters' when the model has them (the base is frozen: no moments), else
  // the weights'. A quantized model without adapters has none (it does not train): its checkpoints never hold one.
  const bool lora = core.lora != nullptr;
  if (core.params.packed_count() > 0 && !lora) with_optimizer = false;
  if (with_optimizer) core.trained().ensure_training();  // a loaded model's moments: zero until it trains
  std::deque<std::vector<uint8_t>>& host_bytes = out.host_bytes;
  for (nn::Param& p : core.params.all()) {
    if (p.is_packed()) {
      const Stored st = stored_as(p);
      std::span<const uint8_t> rows = p.packed;
      if (core.device() != Device::CPU) {
        host_bytes.emplace_back(p.packed.size());
        core.ops().download(host_bytes.back().data(), p.packed.data(), p.packed.size());
        rows = host_bytes.back();
      }
      refs.emplace_back(p.name, st.shape, st.dtype, rows);
      if (!st.scales_shape.empty()) {
        const CSpan words = on_host(p.scales);
        refs.emplace_back(p.name + kScales, st.scales_shape, st.scales_dtype,
                          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(words.data()), words.size_bytes()));
      }
      continue;
    }
    refs.emplace_back(p.name, p.shape, on_host(p.value));
    if (with_optimizer && !lora) {
      refs.emplace_back(kM + p.name, p.shape, on_host(p.m));
      refs.emplace_back(kV + p.name, p.shape, on_host(p.v));
    }
  }
  // The adapters (models/lora_set.h) under their own names ("<stem>.lora_A.weight"), with their moments.
  if (lora)
    for (nn::Param& p : core.lora->params.all()) {
      refs.emplace_back(p.name, p.shape, on_host(p.value));
      if (with_optimizer) {
        refs.emplace_back(kM + p.name, p.shape, on_host(p.m));
        refs.emplace_back(kV + p.name, p.shape, on_host(p.v));
      }
    }
  std::map<std::string, std::string> meta = {
      {"qkv.model", kind},
      {"qkv.config", config_json},
      {"qkv.optimizer", to_json(core.opt().config())},
      {"qkv.step", std::to_string(core.opt().steps())},
      {"qkv.skipped_steps", std::to_string(core.opt().skipped())},
      {"qkv.passes", std::to_string(core.passes)},
      {"qkv.optimizer_state", with_optimizer ? "true" : "false"},
      {"qkv.version", QKV_VERSION},
      {"format", "pt"},
      {kChecksumKey, ""},  // computed below, once the extra keys are known to be allowed
  };
  // The keys written above are what loading reads and verifies: letting a caller replace one would make a
  // checkpoint that lies about its config or fails its own checksums, so they are refused, not overwritten.
  if (core.params.packed_count() > 0) meta[kQuantized] = formats_to_json(core.params);
  if (lora) meta[kLora] = to_string(core.lora->options);
  if (core.params.int8_act()) meta[kActivations] = "int8";
  for (const auto& [key, value] : extra) {
    if (!meta.count(key) && key != kQuantized && key != kLora && key != kActivations) continue;
    std::string reserved;
    for (const auto& [own, unused] : meta) reserved += (reserved.empty() ? "" : ", ") + own;
    for (const char* k : {kQuantized, kLora, kActivations})
      if (!meta.count(k)) reserved += std::string(", ") + k;
    throw Error(detail::cat("checkpoint: metadata key \"", key, "\" is reserved: the checkpoint writes it itself (",
                            reserved, "); use another key"));
  }
  meta[kChecksumKey] = checksum_metadata(refs);
  meta.insert(extra.begin(), extra.end());
  out.meta = std::move(meta);
  return out;
}

}  // namespace

std::vector<uint8_t> save_checkpoint(models::ModelCore& core, const char* kind, const std::string& config_json,
                                     bool with_optimizer, const std::map<std::string, std::string>& extra) {
  const ToSave s = to_save(core, kind, config_json, with_optimizer, extra);
  return serialize_safetensors(s.refs, s.meta);
}

void save_checkpoint_file(const std::string& path, models::ModelCore& core, const char* kind,
                          const std::string& config_json, bool with_optimizer,
                          const std::map<std::string, std::string>& extra) {
  const ToSave s = to_save(core, kind, config_json, with_optimizer, extra);
  write_safetensors_atomic(path, s.refs, s.meta);
}

namespace {
void read_metadata(const std::map<std::string, std::string>& meta, const char* kind, Checkpoint& c);
}  // namespace

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
  read_metadata(meta, kind, c);
  return c;
}

namespace {

void read_metadata(const std::map<std::string, std::string>& meta, const char* kind, Checkpoint& c) {
  const auto it = meta.find("qkv.model");
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
  if (meta.count(kQuantized)) c.formats = formats_from_json(meta.at(kQuantized), &c.packed_shapes);
  if (meta.count(kLora)) {
    try {
      c.lora = lora_options_from_string(meta.at(kLora));
    } catch (const Error& e) {
      throw Error(detail::cat("checkpoint: \"", kLora, "\" = \"", meta.at(kLora), "\" is invalid: ", e.what()));
    }
  }
  if (meta.count(kActivations)) {
    const std::string& a = meta.at(kActivations);
    check(a == "int8" || a == "f32", "checkpoint: \"", kActivations, "\" = \"", a,
          "\" is invalid: expected \"int8\" or \"f32\"");
    c.int8_act = a == "int8";
  }
  check(!c.int8_act || !c.formats.empty(), "checkpoint: \"", kActivations,
        "\" = \"int8\" but the file holds no quantized weights (\"", kQuantized, "\")");
  check(c.formats.empty() || !c.has_optimizer_state || c.lora, "checkpoint: the file holds quantized weights (\"",
        kQuantized, "\") and an optimizer state but no LoRA adapters (\"", kLora,
        "\"): a quantized model without adapters has none (it does not train)");
}

// A tensor as the checks below see it, in a whole file or in a header.
struct TensorMeta {
  const std::string* name;
  const std::string* dtype;
  const std::vector<int64_t>* shape;
};

// qkv::Error naming every missing, mis-shaped and left-over tensor at once, unless `tensors` are exactly the
// model's parameters (with_moments: and their Adam moments; without, moments in the file are ignored), its packed
// ones stored as stored_as() says with their scales, and `formats` (the file's "qkv.quantized") the model's.
//
// `adapters`: the LoRA adapters to expect, when not the model's own (those a load is about to add).
void check_matches(models::ModelCore& core, const std::vector<TensorMeta>& tensors, bool with_moments,
                   const nn::Formats& formats, const std::map<std::string, std::vector<int64_t>>& shapes,
                   nn::Parameters* adapters = nullptr) {
  if (!adapters && core.lora) adapters = &core.lora->params;
  check(!with_moments || !core.trained().moments_sharded(),
        "the Adam moments are sharded across ranks (ZeRO-1): load the checkpoint before joining the group");
  std::map<std::string_view, const TensorMeta*> by_name;
  for (const TensorMeta& t : tensors) by_name.emplace(*t.name, &t);
  std::set<std::string> expected;
  std::vector<std::string> problems;
  const auto expect = [&](const std::string& key, const std::vector<int64_t>& shape, const std::string* dtype) {
    expected.insert(key);
    const auto it = by_name.find(key);
    if (it == by_name.end()) {
      problems.push_back(detail::cat("tensor \"", key, "\" is missing"));
      return;
    }
    const TensorMeta& t = *it->second;
    if (*t.shape != shape)
      problems.push_back(
          detail::cat("tensor \"", key, "\" has shape ", shape_text(*t.shape), ", expected ", shape_text(shape)));
    else if (dtype && *t.dtype != *dtype)
      problems.push_back(detail::cat("tensor \"", key, "\" has dtype ", *t.dtype, ", expected ", *dtype));
    else if (!dtype && *t.dtype != "F32" && *t.dtype != "F16" && *t.dtype != "BF16" && *t.dtype != "F64")
      problems.push_back(detail::cat("tensor \"", key, "\" has dtype ", *t.dtype,
                                     ", expected a floating-point dtype (F32, F16, BF16 or F64)"));
  };
  for (nn::Param& p : core.params.all()) {
    const auto in_file = formats.find(p.name);
    const ops::WeightFormat file_format = in_file == formats.end() ? ops::WeightFormat::F32 : in_file->second;
    if (file_format != p.format) {
      problems.push_back(detail::cat("tensor \"", p.name, "\" is ", ops::format_name(file_format), " in the file but ",
                                     ops::format_name(p.format),
                                     " in this model (load the file with load() or load_file(), which build the "
                                     "model in the file's formats)"));
      expected.insert({p.name, p.name + kScales});
      continue;
    }
    if (p.is_packed()) {
      const Stored st = stored_as(p);
      const auto shape = shapes.find(p.name);
      if (shape != shapes.end() && shape->second != p.shape)
        problems.push_back(detail::cat("\"", kQuantized, "\" gives tensor \"", p.name, "\" the shape ",
                                       shape_text(shape->second), ", expected ", shape_text(p.shape)));
      expect(p.name, st.shape, &st.dtype);
      const auto scales = by_name.find(p.name + kScales);
      if (p.format == ops::WeightFormat::Q4 && scales != by_name.end() && *scales->second->dtype == "F32") {
        expected.insert(p.name + kScales);  // a file from before Q4's bfloat16 scales: say so rather than a shape
        problems.push_back(detail::cat("tensor \"", p.name, kScales, "\" holds q4 scales as F32, as files did before ",
                                       "q4 stored them as bfloat16 (BF16): quantize the float32 model again"));
      } else if (!st.scales_shape.empty()) {
        expect(p.name + kScales, st.scales_shape, &st.scales_dtype);
      }
      continue;
    }
    expect(p.name, p.shape, nullptr);
    if (with_moments && !adapters) {
      expect(kM + p.name, p.shape, nullptr);
      expect(kV + p.name, p.shape, nullptr);
    }
  }
  if (adapters)
    for (nn::Param& p : adapters->all()) {
      expect(p.name, p.shape, nullptr);
      if (with_moments) {
        expect(kM + p.name, p.shape, nullptr);
        expect(kV + p.name, p.shape, nullptr);
      }
    }
  for (const auto& [name, f] : formats) {
    bool packed = false;
    for (const nn::Param& p : core.params.all()) packed = packed || (p.name == name && p.is_packed());
    if (!packed && !expected.count(name))
      problems.push_back(detail::cat("\"", kQuantized, "\" names \"", name, "\" (", ops::format_name(f),
                                     "), which is not a weight matrix of this model"));
  }
  for (const TensorMeta& t : tensors) {
    const bool moment = t.name->rfind(kM, 0) == 0 || t.name->rfind(kV, 0) == 0;
    if (!expected.count(*t.name) && !(moment && !with_moments))
      problems.push_back(detail::cat("tensor \"", *t.name, "\" is not a parameter of this model"));
  }
  if (!problems.empty()) {
    std::string msg = "checkpoint: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw Error(msg + " (the file does not match this model's config)");
  }
}

// Checks everything first, then copies: a bad file changes nothing. with_moments: the file must hold the Adam
// moments too, and they are restored.
void restore(models::ModelCore& core, const SafetensorsFile& file, bool with_moments, const nn::Formats& formats,
             const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::vector<TensorMeta> metas;
  for (const TensorEntry& t : file.tensors) metas.push_back({&t.name, &t.dtype, &t.shape});
  check_matches(core, metas, with_moments, formats, shapes);
  std::map<std::string_view, const TensorEntry*> by_name;
  for (const TensorEntry& t : file.tensors) by_name.emplace(t.name, &t);
  for (nn::Param& p : core.params.all()) {
    if (!p.is_packed() || p.scales.empty()) continue;
    const TensorEntry& t = *by_name.at(p.name + kScales);
    std::vector<float> scales(p.scales.size());
    std::memcpy(scales.data(), t.bytes.data(), t.bytes.size());
    check_scales(t.name, p.format, scales);
  }
  if (with_moments) core.trained().ensure_training();
  std::vector<float> converted;
  const auto copy = [&](const std::string& key, Span dst) {
    const TensorEntry& t = *by_name.at(key);
    if (t.dtype == "F32") {  // the file's bytes are the values: no conversion, no host copy
      core.ops().upload(dst.data(), t.bytes.data(), t.bytes.size());
      return;
    }
    converted.resize(dst.size());
    to_floats(t.dtype, t.bytes, converted);
    core.ops().upload(dst.data(), converted.data(), converted.size() * sizeof(float));
  };
  for (nn::Param& p : core.params.all()) {
    if (p.is_packed()) {  // the rows and scales as the file holds them: the device's bytes
      core.ops().upload(p.packed.data(), by_name.at(p.name)->bytes.data(), p.packed.size());
      if (!p.scales.empty())
        core.ops().upload(p.scales.data(), by_name.at(p.name + kScales)->bytes.data(), p.scales.size_bytes());
      continue;
    }
    copy(p.name, p.value);
    if (with_moments && !core.lora) {
      copy(kM + p.name, p.m);
      copy(kV + p.name, p.v);
    }
  }
  if (core.lora)
    for (nn::Param& p : core.lora->params.all()) {
      copy(p.name, p.value);
      if (with_moments) {
        copy(kM + p.name, p.m);
        copy(kV + p.name, p.v);
      }
    }
}

std::vector<Target> core_targets(models::ModelCore& core) {
  std::vector<Target> t;
  for (nn::Param& p : core.params.all()) t.push_back({p.name, p.shape});
  return t;
}

}  // namespace

namespace {

// The checkpoint's adapters ("qkv.lora") to add to the model, built but not attached: null when the model has the
// same ones already, or the file none. qkv::Error when they differ, or when the model has adapters the file lacks.
std::unique_ptr<models::LoraSet> adapters_to_add(models::ModelCore& core, const Checkpoint& c) {
  if (c.format != "qkv") return nullptr;
  if (!c.lora) {
    check(!core.lora, "checkpoint: this model has LoRA adapters (", core.lora ? to_string(core.lora->options) : "",
          ") and the file none (no \"", kLora, "\" metadata): remove_lora() first, or load the file into a new model");
    return nullptr;
  }
  if (!core.lora) return models::build_lora(core, *c.lora);
  const LoraOptions& a = core.lora->options;
  const LoraOptions& b = *c.lora;
  check(a.rank == b.rank && a.alpha == b.alpha && a.dropout == b.dropout && a.targets == b.targets,
        "checkpoint: the file's LoRA adapters (\"", kLora, "\" = \"", to_string(b), "\") are not this model's (",
        to_string(a), "): remove_lora() first, or load the file into a new model");
  return nullptr;
}

// The streaming load's (a new model, discarded on error): the file's adapters attached before its tensors are checked.
void attach_lora(models::ModelCore& core, const Checkpoint& c) {
  if (std::unique_ptr<models::LoraSet> set = adapters_to_add(core, c)) models::attach_lora(core, std::move(set));
}

}  // namespace

bool restore_checkpoint(models::ModelCore& core, const Checkpoint& c) {
  std::unique_ptr<models::LoraSet> set = adapters_to_add(core, c);
  const bool added = set != nullptr;
  if (added) {
    // Checked against the adapters before they are attached: attaching releases the base's gradients and Adam
    // moments, which a refused file must leave as they were.
    std::vector<TensorMeta> metas;
    for (const TensorEntry& t : c.file.tensors) metas.push_back({&t.name, &t.dtype, &t.shape});
    check_matches(core, metas, c.has_optimizer_state, c.formats, c.packed_shapes, &set->params);
    models::attach_lora(core, std::move(set));
  }
  try {
    restore_checkpoint_tensors(core, c);
  } catch (...) {
    if (added) models::remove_lora(core);  // the base was not touched: checked before any copy
    throw;
  }
  return added;
}

void restore_checkpoint_tensors(models::ModelCore& core, const Checkpoint& c) {
  if (c.format != "qkv") {
    // heads: seed 004's, which its config holds; the other formats' mappings do not use them.
    const std::vector<Target> targets = core_targets(core);
    const auto config = nlohmann::json::parse(c.config_json);
    restore(core, map_weights(c.file, c.format, kind_of(targets), targets, config.value("heads", 0)), false, {}, {});
  } else {
    restore(core, c.file, c.has_optimizer_state, c.formats, c.packed_shapes);
  }
  core.params.set_int8_act(c.int8_act);
  core.opt().set_steps(c.has_optimizer_state ? c.step : 0);
  core.opt().set_skipped(c.has_optimizer_state ? c.skipped : 0);
  core.passes = c.passes;
}

void restore_weights(models::ModelCore& core, std::span<const uint8_t> bytes, const std::string& config_json) {
  const SafetensorsFile file = parse_safetensors(bytes);
  verify_checksums(file);
  // Adapters on one side only: said as such, rather than as each adapter tensor missing or left over.
  const auto adapter_tensor = std::find_if(file.tensors.begin(), file.tensors.end(), [](const TensorEntry& t) {
    return t.name.find(".lora_A.") != std::string::npos || t.name.find(".lora_B.") != std::string::npos;
  });
  if (core.lora && adapter_tensor == file.tensors.end())
    throw Error(detail::cat("load_weights: this model has LoRA adapters (", to_string(core.lora->options),
                            ") and the file none of their tensors: remove_lora() first (and add_lora again after), "
                            "or load a checkpoint saved with them"));
  if (!core.lora && adapter_tensor != file.tensors.end())
    throw Error(detail::cat("load_weights: the file holds LoRA adapter tensors (\"", adapter_tensor->name,
                            "\") and this model has no adapters: load it with load() or load_state(), which add the "
                            "file's adapters, or add_lora() with the file's options first"));
  std::string format = "qkv";
  try {
    format = detect_format(file);
  } catch (const Error&) {
    // Names of no known format: reported below as qkv's (every missing and left-over tensor).
  }
  const int heads = nlohmann::json::parse(config_json).at("heads").get<int>();
  const std::vector<Target> targets = core_targets(core);
  if (format != "qkv") {
    restore(core, map_weights(file, format, kind_of(targets), targets, heads), false, {}, {});
    return;
  }
  const auto quantized = file.metadata.find(kQuantized);
  std::map<std::string, std::vector<int64_t>> shapes;
  const nn::Formats formats =
      quantized == file.metadata.end() ? nn::Formats{} : formats_from_json(quantized->second, &shapes);
  try {
    restore(core, file, false, formats, shapes);
  } catch (const Error&) {
    // qkv's names are nn.Transformer's, so a torch state dict can look like them (a bare nn.TransformerEncoder's
    // "layers.N" under a Classifier's "encoder.layers.N"): try that before reporting the qkv names' problems.
    if (file.metadata.count("qkv.model")) throw;
    const std::exception_ptr first = std::current_exception();
    try {
      restore(core, map_weights(file, "torch", kind_of(targets), targets, heads), false, {}, {});
    } catch (const Error&) {
      std::rethrow_exception(first);
    }
  }
}

bool checkpoint_from_header(const SafetensorsHeader& header, const char* kind, Checkpoint& c) {
  if (!header.metadata.count("qkv.model")) return false;
  read_metadata(header.metadata, kind, c);
  return true;
}

CheckpointSink::CheckpointSink(models::ModelCore& core, const Checkpoint& c, const SafetensorsHeader& header)
    : core_(core), c_(c), header_(header) {
  attach_lora(core, c);
  std::vector<TensorMeta> metas;
  std::vector<std::string> names;
  for (const TensorInfo& t : header.tensors) {
    metas.push_back({&t.name, &t.dtype, &t.shape});
    names.push_back(t.name);
  }
  check_matches(core, metas, c.has_optimizer_state, c.formats, c.packed_shapes);
  core.params.set_int8_act(c.int8_act);
  sums_ = expected_checksums(header.metadata, names);
  if (c.has_optimizer_state) core.trained().ensure_training();
  std::map<std::string, Span> dst;
  std::map<std::string, std::pair<std::span<uint8_t>, const nn::Param*>> raw;
  for (nn::Param& p : core.params.all()) {
    if (p.is_packed()) {
      raw[p.name] = {p.packed, nullptr};
      if (!p.scales.empty())
        raw[p.name + kScales] = {{reinterpret_cast<uint8_t*>(p.scales.data()), p.scales.size_bytes()}, &p};
      continue;
    }
    dst[p.name] = p.value;
    if (c.has_optimizer_state && !core.lora) {
      dst[kM + p.name] = p.m;
      dst[kV + p.name] = p.v;
    }
  }
  if (core.lora)
    for (nn::Param& p : core.lora->params.all()) {
      dst[p.name] = p.value;
      if (c.has_optimizer_state) {
        dst[kM + p.name] = p.m;
        dst[kV + p.name] = p.v;
      }
    }
  for (const TensorInfo& t : header.tensors) {
    const auto it = dst.find(t.name);
    dst_.push_back(it == dst.end() ? Span{} : it->second);
    const auto r = raw.find(t.name);
    raw_.push_back(r == raw.end() ? Raw{} : Raw{r->second.first, r->second.second});
  }
  crc_.assign(header.tensors.size(), 0);
}

std::span<uint8_t> CheckpointSink::place(size_t i) {
  const TensorInfo& t = header_.tensors[i];
  if (!raw_[i].to.empty()) return core_.device() == Device::CPU ? raw_[i].to : std::span<uint8_t>{};
  if (dst_[i].empty() || t.dtype != "F32" || core_.device() != Device::CPU) return {};
  return {reinterpret_cast<uint8_t*>(dst_[i].data()), dst_[i].size_bytes()};
}

void CheckpointSink::take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) {
  crc_[i] = crc32(bytes, crc_[i]);  // while the bytes are in cache: the check costs no second pass
  if (!raw_[i].to.empty()) {        // packed rows or their scales: the file's bytes are the device's
    if (raw_[i].to.data() + offset != bytes.data())
      core_.ops().upload(raw_[i].to.data() + offset, bytes.data(), bytes.size());
    return;
  }
  if (dst_[i].empty()) return;  // a moment of a file loaded without its optimizer state
  const TensorInfo& t = header_.tensors[i];
  auto* to = reinterpret_cast<uint8_t*>(dst_[i].data());
  if (t.dtype == "F32") {
    if (to + offset != bytes.data()) core_.ops().upload(to + offset, bytes.data(), bytes.size());
    return;
  }
  // Whole elements (the reader's staging guarantees it), converted to float32 on the host.
  const size_t element = dtype_size(t.dtype), first = static_cast<size_t>(offset / element);
  floats_.resize(bytes.size() / element);
  to_floats(t.dtype, bytes, floats_);
  core_.ops().upload(dst_[i].data() + first, floats_.data(), floats_.size() * sizeof(float));
}

void CheckpointSink::end(size_t i) {
  check_checksum(header_.tensors[i].name, sums_[i], crc_[i]);
  if (const nn::Param* p = raw_[i].scales_of) {
    floats_.resize(p->scales.size());
    core_.ops().download(floats_.data(), p->scales.data(), p->scales.size_bytes());
    check_scales(header_.tensors[i].name, p->format, floats_);
  }
}

void CheckpointSink::finish() {
  core_.opt().set_steps(c_.has_optimizer_state ? c_.step : 0);
  core_.opt().set_skipped(c_.has_optimizer_state ? c_.skipped : 0);
  core_.passes = c_.passes;
}

bool load_file_streaming(const std::string& path, const char* kind,
                         const std::function<models::ModelCore&(const Checkpoint&)>& make) {
  Checkpoint c;
  std::unique_ptr<CheckpointSink> sink;
  read_safetensors_stream(path, [&](SafetensorsReader& reader) {
    const SafetensorsHeader& header = reader.header();
    if (!checkpoint_from_header(header, kind, c)) return;  // no sink: the reading stops after the header
    models::ModelCore& core = make(c);
    sink = std::make_unique<CheckpointSink>(core, c, header);
    reader.set_sink(sink.get());
  });
  if (!sink) return false;
  sink->finish();
  return true;
}

bool load_bytes_streaming(std::span<const uint8_t> bytes, const char* kind,
                          const std::function<models::ModelCore&(const Checkpoint&)>& make) {
  SafetensorsReader reader(bytes.size());
  try {
    while (!reader.has_header()) {
      const std::span<uint8_t> to = reader.buffer();
      const size_t n = std::min(to.size(), bytes.size() - static_cast<size_t>(reader.position()));
      if (n == 0) return false;
      std::memcpy(to.data(), bytes.data() + reader.position(), n);
      reader.commit(n);
    }
  } catch (const Error&) {
    return false;
  }
  Checkpoint c;
  if (!checkpoint_from_header(reader.header(), kind, c)) return false;
  CheckpointSink sink(make(c), c, reader.header());
  reader.set_sink(&sink);
  reader.push(bytes.subspan(static_cast<size_t>(reader.position())));
  reader.finish();
  sink.finish();
  return true;
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
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  check(in.good(), "cannot open \"", path, "\" for reading");
  // Sized once and read in one call: a byte-at-a-time iterator read 500 MB at tens of MB/s.
  const std::streamoff size = in.tellg();
  check(size >= 0, "cannot read \"", path, "\" (not a regular file?)");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  check(in.gcount() == size, "cannot read \"", path, "\": it shrank while being read");
  return bytes;
}

}  // namespace qkv::io
