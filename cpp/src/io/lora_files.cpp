// Adapter files as PEFT has them (qkv/lora_files.h): adapter_config.json + adapter_model.safetensors.
//
// PEFT's rules this file follows (peft/tuners/lora, peft/utils/save_and_load.py):
//   - a module is adapted when its name equals a target_modules entry or ends with "." + the entry (a string
//     target_modules is a regular expression the whole name must match);
//   - its LoRA layer holds lora_A: Linear(in, r) and lora_B: Linear(r, out), both without bias, so the state dict
//     has lora_A.weight (r, in) and lora_B.weight (out, r) whatever fan_in_fan_out says (that flag only tells the
//     merge that the base weight is stored (in, out), as GPT-2's Conv1D stores it);
//   - the saved state dict drops the adapter's name ("lora_A.default.weight" -> "lora_A.weight") and keeps the
//     PeftModel's prefix "base_model.model."; the forward is base(x) + lora_B(lora_A(dropout(x))) * lora_alpha / r.
#include "qkv/lora_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "io/checkpoint.h"
#include "io/model_access.h"
#include "models/lora_set.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"

namespace qkv {
namespace {

using nlohmann::json;

const std::string kPrefix = "base_model.model.";
const std::string kA = ".lora_A.weight", kB = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const std::string& head) { return s.rfind(head, 0) == 0; }

// One adapted Linear: its target, its stem in qkv's names ("layers.0.self_attn.in_proj"), and the sizes of
// A (rank, in) and B (out, rank).
struct Module {
  std::string target, stem;
  int64_t in = 0, out = 0;
};

// The modules `targets` adapt in `model`, from its base parameters' names and shapes, by qkv/lora.h's rules (the
// stems Model::lora_parameters() names): every attention's in_proj_weight (3C, C) gives "in_proj" (qkv) or
// "in_proj_q/_k/_v" (C -> C each), out_proj.weight "out_proj", the feed-forward's linear1 / linear2 theirs, and the
// head its stem: "lm_head" (a language model's, tied or not: (V, C)), each "classifier(.N)" Linear, "generator".
std::vector<Module> modules_of(Model& model, const std::set<std::string>& targets) {
  std::vector<Module> out;
  const auto want = [&](const char* t) { return targets.count(t) > 0; };
  auto* lm = dynamic_cast<LanguageModel*>(&model);
  for (const nn::Param& p : io::ModelAccess::core(model).params.all()) {  // names and shapes (host), on any device
    const std::string& n = p.name;
    if (p.shape.size() != 2 || n.find(".lora_") != std::string::npos) continue;
    const int64_t rows = p.shape[0], cols = p.shape[1];
    if (ends_with(n, ".in_proj_weight")) {
      const std::string stem = n.substr(0, n.size() - 7);  // "...in_proj"
      if (want("qkv")) out.push_back({"qkv", stem, cols, rows});
      for (const char* part : {"q", "k", "v"})
        if (want(part)) out.push_back({part, stem + "_" + part, cols, rows / 3});
      continue;
    }
    const std::string stem = ends_with(n, ".weight") ? n.substr(0, n.size() - 7) : "";
    if (ends_with(n, ".out_proj.weight") && want("out")) out.push_back({"out", stem, cols, rows});
    if (ends_with(n, ".linear1.weight") && want("up")) out.push_back({"up", stem, cols, rows});
    if (ends_with(n, ".linear2.weight") && want("down")) out.push_back({"down", stem, cols, rows});
    if (!want("head") || lm) continue;
    static const std::regex classifier_head(R"(classifier(\.\d+)?\.weight)");
    if (n == "generator.weight" || std::regex_match(n, classifier_head)) out.push_back({"head", stem, cols, rows});
  }
  if (lm && want("head")) out.push_back({"head", "lm_head", lm->config().d_model, lm->config().vocab_size});
  return out;
}

// GPT-2's module name (GPT2LMHeadModel's named_modules) for qkv's stem of a language model. Empty: no GPT-2 module
// (q, k, v's stems, or a stem of no known module).
std::string gpt2_module(const std::string& stem) {
  if (stem == "lm_head") return stem;
  if (!starts_with(stem, "layers.")) return "";
  const size_t dot = stem.find('.', 7);
  if (dot == std::string::npos) return "";
  const std::string layer = stem.substr(7, dot - 7), rest = stem.substr(dot + 1);
  if (layer.empty() || !std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
  static const std::map<std::string, std::string> to = {{"self_attn.in_proj", "attn.c_attn"},
                                                        {"self_attn.out_proj", "attn.c_proj"},
                                                        {"linear1", "mlp.c_fc"},
                                                        {"linear2", "mlp.c_proj"}};
  const auto it = to.find(rest);
  return it == to.end() ? "" : "transformer.h." + layer + "." + it->second;
}
// The module's name in the file's naming.
std::string module_name(const Module& m, AdapterNames names) {
  return names == AdapterNames::Gpt2 ? gpt2_module(m.stem) : m.stem;
}

// target_modules' entry for a module: the shortest suffix of its name that matches exactly the modules of its
// target (GPT-2's "c_proj" would also match the feed-forward's c_proj, so the attention's is "attn.c_proj").
std::string target_entry(const Module& m, AdapterNames names) {
  if (names == AdapterNames::Gpt2) {
    static const std::map<std::string, std::string> entry = {
        {"qkv", "c_attn"}, {"out", "attn.c_proj"}, {"up", "c_fc"}, {"down", "mlp.c_proj"}, {"head", "lm_head"}};
    return entry.at(m.target);
  }
  if (m.target == "head") return m.stem;
  return m.stem.substr(m.stem.rfind('.') + 1);
}

const char* task_type(Model& model) {
  if (dynamic_cast<LanguageModel*>(&model)) return "CAUSAL_LM";
  if (dynamic_cast<Seq2Seq*>(&model)) return "SEQ_2_SEQ_LM";
  return nullptr;  // a classifier: PEFT's SEQ_CLS would also save the head whole (modules_to_save)
}

// A float as JSON in its shortest round-tripping decimal form (0.05f is 0.05, not 0.05000000074505806); whole
// numbers as integers (PEFT's lora_alpha is an int).
json number(float x) {
  if (std::abs(x) < 1e15f && x == std::trunc(x)) return json(static_cast<int64_t>(x));  // range first: no UB cast
  // The fewest significant digits that read back as x (std::to_chars for floats is missing from the wasm build's
  // libc++).
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return json::parse(buf);
}

// The model's adapter parameters, its steps in flight settled. Their values are device memory on every executor
// (the CPU's is the host's): read and written through the executor's download and upload, so that a model on WebGPU
// or CUDA saves and loads its adapters where it is (Model::lora_parameters, views for the host, refuses there).
std::vector<nn::Param*> adapter_params(Model& model) {
  models::ModelCore& core = io::ModelAccess::core(model);
  core.settle_all();
  std::vector<nn::Param*> out;
  if (core.lora)
    for (nn::Param& p : core.lora->params.all()) out.push_back(&p);
  return out;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

AdapterFiles save_adapter(Model& model, AdapterNames names, const std::string& base_model) {
  check(model.has_lora(), "save_adapter: the model has no LoRA adapters (add_lora or load_adapter first)");
  const LoraOptions& o = model.lora_options();
  if (names == AdapterNames::Gpt2) {
    check(dynamic_cast<LanguageModel*>(&model) != nullptr,
          "save_adapter: GPT-2 names are a language model's; this model is not one (save it in qkv names)");
    for (const std::string& t : o.targets)
      check(t != "q" && t != "k" && t != "v", "save_adapter: target \"", t,
            "\" has no GPT-2 module (GPT-2's c_attn projects q, k and v together): train with the target qkv, or save "
            "in qkv names");
  }
  const std::vector<Module> modules = modules_of(model, {o.targets.begin(), o.targets.end()});
  std::map<std::string, const Module*> by_stem;
  for (const Module& m : modules) by_stem[m.stem] = &m;
  std::vector<TensorRef> refs;
  std::set<std::string> entries;
  std::deque<std::vector<float>> host;  // each adapter's values, downloaded
  for (const nn::Param* p : adapter_params(model)) {
    const std::string& n = p->name;
    const bool a = ends_with(n, kA);
    check(a || ends_with(n, kB), "save_adapter: adapter tensor \"", n, "\" is not named <module>", kA, " or ", kB);
    const std::string stem = n.substr(0, n.size() - kA.size());
    const auto it = by_stem.find(stem);
    check(it != by_stem.end(), "save_adapter: adapter \"", stem, "\" is not a module of the targets ", to_string(o),
          " (lora_parameters and lora_files disagree)");
    const std::string module = module_name(*it->second, names);
    check(!module.empty(), "save_adapter: adapter \"", stem, "\" has no GPT-2 module name");
    entries.insert(target_entry(*it->second, names));
    std::vector<float>& values = host.emplace_back(p->value.size());
    io::ModelAccess::core(model).ops().download(values.data(), p->value.data(), p->value.size_bytes());
    refs.emplace_back(kPrefix + module + (a ? kA : kB), p->shape, std::span<const float>(values));
  }
  json c = {
      {"base_model_name_or_path", base_model.empty() ? json() : json(base_model)},
      {"bias", "none"},
      {"fan_in_fan_out", names == AdapterNames::Gpt2},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", number(o.alpha)},
      {"lora_dropout", number(o.dropout)},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", o.rank},
      {"revision", nullptr},
      {"target_modules", std::vector<std::string>(entries.begin(), entries.end())},
      {"task_type", task_type(model) ? json(task_type(model)) : json()},
  };
  AdapterFiles files;
  files.config_json = c.dump(2) + "\n";
  files.safetensors = serialize_safetensors(refs, {{"format", "pt"}});
  return files;
}

void save_adapter_dir(Model& model, const std::string& dir, AdapterNames names, const std::string& base_model) {
  const AdapterFiles f = save_adapter(model, names, base_model);
  io::with_path(dir, [&] {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    check(!ec && std::filesystem::is_directory(dir), "cannot create the folder (", ec.message(), ")");
  });
  const auto path = [&](const char* file) { return (std::filesystem::path(dir) / file).string(); };
  write_safetensors_atomic(path("adapter_model.safetensors"), f.safetensors);
  write_safetensors_atomic(path("adapter_config.json"),
                           std::span(reinterpret_cast<const uint8_t*>(f.config_json.data()), f.config_json.size()));
}

namespace {

// The options an adapter_config.json gives, every key qkv cannot honour refused by name; the target_modules entries
// (empty: none, or a regular expression in `pattern`).
struct Config {
  LoraOptions options;
  std::vector<std::string> entries;
  std::string pattern;
  bool has_pattern = false;
};

Config read_config(const std::string& text) {
  const std::string where = "adapter_config.json: ";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(where + "not valid JSON (" + e.what() + ")");
  }
  check(j.is_object(), where, "a JSON ", j.type_name(), ", expected an object");
  const auto has = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  check(has("peft_type"), where, "no \"peft_type\": expected \"LORA\" (a PEFT LoRA adapter)");
  check(j.at("peft_type") == "LORA", where, "\"peft_type\" is ", j.at("peft_type").dump(),
        ": qkv loads LoRA adapters only (expected \"LORA\")");
  Config c;
  check(has("r") && j.at("r").is_number_integer() && j.at("r").get<int64_t>() >= 1 &&
            j.at("r").get<int64_t>() <= kMaxLoraRank,
        where, "\"r\" is ", has("r") ? j.at("r").dump() : std::string("missing"), ": expected an integer from 1 to ",
        kMaxLoraRank);
  c.options.rank = j.at("r").get<int>();
  c.options.alpha = 8.f;  // LoraConfig's default
  if (has("lora_alpha")) {
    check(j.at("lora_alpha").is_number(), where, "\"lora_alpha\" is ", j.at("lora_alpha").dump(),
          ": expected a number");
    c.options.alpha = j.at("lora_alpha").get<float>();
  }
  if (has("lora_dropout")) {
    check(j.at("lora_dropout").is_number(), where, "\"lora_dropout\" is ", j.at("lora_dropout").dump(),
          ": expected a number in [0, 1)");
    c.options.dropout = j.at("lora_dropout").get<float>();
  }
  if (has("bias"))
    check(j.at("bias") == "none", where, "\"bias\" is ", j.at("bias").dump(),
          ": qkv's adapters have no bias of their own (expected \"none\")");
  if (has("fan_in_fan_out"))
    check(j.at("fan_in_fan_out").is_boolean(), where, "\"fan_in_fan_out\" is ", j.at("fan_in_fan_out").dump(),
          ": expected true or false");
  const auto refuse_if = [&](const char* key, bool set, const char* why) {
    check(!set, where, "\"", key, "\" is ", j.contains(key) ? j.at(key).dump() : "", ": ", why);
  };
  const auto nonempty = [&](const char* key) { return has(key) && !(j.at(key).is_structured() && j.at(key).empty()); };
  refuse_if("modules_to_save", nonempty("modules_to_save"),
            "qkv loads the LoRA tensors only, not whole modules trained beside them (expected null)");
  refuse_if("use_dora", has("use_dora") && j.at("use_dora") != false,
            "DoRA's magnitude vectors are not LoRA's (expected false)");
  refuse_if("use_rslora", has("use_rslora") && j.at("use_rslora") != false,
            "rank-stabilised LoRA scales by alpha / sqrt(r), qkv by alpha / r (expected false)");
  refuse_if("rank_pattern", nonempty("rank_pattern"), "qkv gives every adapter the same rank r (expected {})");
  refuse_if("alpha_pattern", nonempty("alpha_pattern"), "qkv gives every adapter the same alpha (expected {})");
  refuse_if("layers_to_transform", has("layers_to_transform"), "qkv adapts every layer a target names (expected null)");
  if (has("target_modules")) {
    const json& t = j.at("target_modules");
    if (t.is_string()) {
      c.pattern = t.get<std::string>();
      c.has_pattern = true;
    } else {
      check(t.is_array() && std::all_of(t.begin(), t.end(), [](const json& e) { return e.is_string(); }), where,
            "\"target_modules\" is ", t.dump(), ": expected a list of module names or a regular expression");
      c.entries = t.get<std::vector<std::string>>();
    }
  }
  return c;
}

}  // namespace

void load_adapter(Model& model, const AdapterFiles& files) {
  Config config = read_config(files.config_json);
  const SafetensorsFile file = [&] {
    try {
      return parse_safetensors(files.safetensors);
    } catch (const Error& e) {
      throw Error(std::string("adapter_model.safetensors: ") + e.what());
    }
  }();
  // Every module qkv could adapt in this model, and the naming of the file (GPT-2's when a tensor uses it).
  const std::vector<std::string>& all = models::lora_target_names();
  std::set<std::string> everything(all.begin(), all.end());
  std::vector<Module> candidates = modules_of(model, everything);
  bool gpt2 = false;
  for (const TensorEntry& t : file.tensors) gpt2 = gpt2 || starts_with(t.name, kPrefix + "transformer.");
  const AdapterNames names = gpt2 ? AdapterNames::Gpt2 : AdapterNames::Qkv;
  if (gpt2) {
    check(dynamic_cast<LanguageModel*>(&model) != nullptr,
          "adapter_model.safetensors: the tensors have GPT-2's names (transformer.h.N...), a language model's; this "
          "model is not one");
    std::erase_if(candidates, [](const Module& m) { return gpt2_module(m.stem).empty(); });
  }
  std::map<std::string, const Module*> by_name;  // by the module's name in the file's naming
  for (const Module& m : candidates) by_name[module_name(m, names)] = &m;

  // The targets: those of the modules target_modules matches (as PEFT matches them), and of the file's tensors.
  std::set<std::string> targets;
  std::vector<std::string> problems;
  for (const std::string& e : config.entries) {
    bool matched = false;
    for (const auto& [name, m] : by_name)
      if (name == e || ends_with(name, "." + e)) {
        targets.insert(m->target);
        matched = true;
      }
    if (!matched)
      problems.push_back(detail::cat("target_modules entry \"", e, "\" names no module qkv adapts in this model"));
  }
  if (config.has_pattern) {
    try {
      const std::regex re(config.pattern);
      for (const auto& [name, m] : by_name)
        if (std::regex_match(name, re)) targets.insert(m->target);
    } catch (const std::regex_error& e) {
      throw Error("adapter_config.json: \"target_modules\" = \"" + config.pattern +
                  "\" is not a regular expression qkv reads (" + e.what() + ")");
    }
  }
  std::map<std::string, const TensorEntry*> tensors;  // by the file's name
  for (const TensorEntry& t : file.tensors) {
    tensors[t.name] = &t;
    const bool a = ends_with(t.name, kA), b = ends_with(t.name, kB);
    const std::string module = starts_with(t.name, kPrefix) && (a || b)
                                   ? t.name.substr(kPrefix.size(), t.name.size() - kPrefix.size() - kA.size())
                                   : "";
    const auto it = by_name.find(module);
    if (it != by_name.end()) targets.insert(it->second->target);
  }
  config.options.targets.clear();
  for (const std::string& t : all)
    if (targets.count(t)) config.options.targets.push_back(t);
  if (config.options.targets.empty() && problems.empty())
    problems.push_back(
        "no tensor is a LoRA tensor (base_model.model.<module>.lora_A.weight / .lora_B.weight) of a "
        "module qkv adapts in this model");
  if (!problems.empty()) {
    std::string msg = "load_adapter: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw Error(msg);
  }
  try {
    models::check_lora_options(config.options);
  } catch (const Error& e) {
    throw Error(std::string("adapter_config.json: ") + e.what());
  }

  // Every expected tensor present with its shape and a float dtype; nothing left over. qkv names by the file's.
  const int64_t r = config.options.rank;
  std::map<std::string, std::string> qkv_of;  // the file's name -> qkv's
  std::set<std::string> expected;
  for (const Module& m : modules_of(model, targets)) {
    const std::string module = kPrefix + module_name(m, names);
    for (const bool a : {true, false}) {
      const std::string key = module + (a ? kA : kB);
      const std::vector<int64_t> shape = a ? std::vector<int64_t>{r, m.in} : std::vector<int64_t>{m.out, r};
      expected.insert(key);
      qkv_of[key] = m.stem + (a ? kA : kB);
      const auto it = tensors.find(key);
      if (it == tensors.end()) {
        problems.push_back(detail::cat("tensor \"", key, "\" is missing"));
      } else if (it->second->shape != shape) {
        problems.push_back(detail::cat("tensor \"", key, "\" has shape ", shape_text(it->second->shape), ", expected ",
                                       shape_text(shape), " (r = ", r, ")"));
      } else if (const std::string& d = it->second->dtype; d != "F32" && d != "F16" && d != "BF16" && d != "F64") {
        problems.push_back(detail::cat("tensor \"", key, "\" has dtype ", d,
                                       ", expected a floating-point dtype (F32, F16, BF16, F64)"));
      }
    }
  }
  for (const TensorEntry& t : file.tensors)
    if (!expected.count(t.name))
      problems.push_back(detail::cat("tensor \"", t.name, "\" is not a LoRA tensor of this model's targets"));
  if (!problems.empty()) {
    std::string msg = "adapter_model.safetensors: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw Error(msg);
  }

  // Checked. The new adapters are built and given the file's values (an error, out of memory, leaves the model with
  // the adapters it had), then they replace the model's.
  std::map<std::string, std::vector<float>> values;
  for (const auto& [key, name] : qkv_of) values[name] = file.floats(key);
  config.options.seed = model.has_lora() ? model.lora_options().seed : 0;
  models::ModelCore& core = io::ModelAccess::core(model);
  core.settle_all();
  std::unique_ptr<models::LoraSet> set = models::build_lora(core, config.options, /*replacing=*/true);
  for (nn::Param& p : set->params.all()) {
    const auto it = values.find(p.name);
    check(it != values.end() && it->second.size() == p.value.size(), "load_adapter: the model's adapter tensor \"",
          p.name, "\" is not one lora_files expects (lora_parameters and lora_files disagree)");
    core.ops().upload(p.value.data(), it->second.data(), p.value.size_bytes());
  }
  if (core.lora) models::remove_lora(core);
  models::attach_lora(core, std::move(set));
  io::ModelAccess::reset(model, true);  // as Model::add_lora: the layers plan their adapters' buffers
}

void load_adapter_dir(Model& model, const std::string& dir) {
  io::with_path(dir, [&] {
    check(std::filesystem::is_directory(dir), "not a folder: expected one holding adapter_config.json and ",
          "adapter_model.safetensors (as PEFT's save_pretrained writes them)");
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      check(std::filesystem::exists(std::filesystem::path(dir) / f), "the folder has no ", f,
            f == std::string("adapter_model.safetensors")
                ? " (an adapter_model.bin is a pickle: save it with safe_serialization=True)"
                : "");
    const auto read = [&](const char* f) { return io::read_file((std::filesystem::path(dir) / f).string()); };
    const std::vector<uint8_t> config = read("adapter_config.json");
    AdapterFiles files{std::string(config.begin(), config.end()), read("adapter_model.safetensors")};
    load_adapter(model, files);
  });
}

}  // namespace qkv
