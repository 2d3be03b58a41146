// Models as the Hugging Face Hub serves them (qkv/import.h, import_pretrained): a folder of config.json and
// model.safetensors (or its shards), config.json mapped onto a qkv config, the weights through the gpt2
// format's table (io/import.cpp): mapped whole for import_pretrained, streamed into the model for load_pretrained
// (io/import_sink.h). Only GPT-2's architecture is known here; others are refused by model_type.
#include "io/pretrained.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "io/checkpoint.h"
#include "io/import.h"
#include "nn/parameters.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/pretrained_loader.h"

namespace qkv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Hugging Face's activation names (transformers' ACT2FN) -> qkv's. gelu_new, gelu_pytorch_tanh and gelu_fast
// are all 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gelu_fast writes sqrt(2/pi) as 0.7978845608).
std::string activation_of(const std::string& hf) {
  if (hf == "gelu_new" || hf == "gelu_pytorch_tanh" || hf == "gelu_fast") return "gelu_tanh";
  if (hf == "gelu" || hf == "relu") return hf;
  throw Error(detail::cat("config.json: activation_function \"", hf,
                          "\" is not one qkv runs: expected gelu_new, gelu_pytorch_tanh, gelu_fast, gelu or relu"));
}

int positive_int(const json& c, const std::string& key) {
  check(c.contains(key), "config.json: \"", key, "\" is missing: a GPT-2 config must give it");
  const json& v = c.at(key);
  check(v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= (1 << 30), "config.json: \"", key,
        "\" is ", v.dump(), ": expected a positive integer");
  return v.get<int>();
}

// GPT-2's config.json as qkv's LanguageModel config (JSON), refusing what qkv's GPT-2 cannot honour, by field.
std::string config_of(std::string_view text, std::vector<std::string>& notes) {
  json c;
  try {
    c = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(detail::cat("config.json is not valid JSON: ", e.what()));
  }
  check(c.is_object(), "config.json: expected a JSON object");
  check(c.contains("model_type"), "config.json: \"model_type\" is missing: expected \"gpt2\"");
  const std::string type =
      c.at("model_type").is_string() ? c.at("model_type").get<std::string>() : c.at("model_type").dump();
  check(type == "gpt2", "config.json: model_type \"", type,
        "\" is an architecture qkv does not run: qkv imports GPT-2-family models (model_type \"gpt2\": gpt2, "
        "distilgpt2, gpt2-medium/large/xl)");
  const auto flag = [&](const char* key, bool want, const char* why) {
    if (c.contains(key) && !c.at(key).is_null())
      check(c.at(key).is_boolean() && c.at(key).get<bool>() == want, "config.json: \"", key, "\" is ", c.at(key).dump(),
            ": qkv's GPT-2 ", why);
  };
  flag("scale_attn_weights", true, "scales attention scores by 1/sqrt(head_dim) (expected true)");
  flag("scale_attn_by_inverse_layer_idx", false, "does not scale scores by 1/(layer + 1) (expected false)");
  flag("add_cross_attention", false, "is decoder-only (expected false)");
  flag("tie_word_embeddings", true, "ties its head to the token embedding (expected true)");
  json q;
  q["vocab_size"] = positive_int(c, "vocab_size");
  q["context"] = positive_int(c, c.contains("n_positions") ? "n_positions" : "n_ctx");
  const int C = positive_int(c, "n_embd"), H = positive_int(c, "n_head");
  check(C % H == 0, "config.json: n_embd ", C, " is not divisible by n_head ", H);
  q["d_model"] = C;
  q["heads"] = H;
  q["layers"] = positive_int(c, "n_layer");
  q["d_ff"] = c.contains("n_inner") && !c.at("n_inner").is_null() ? positive_int(c, "n_inner") : 4 * C;
  const json act = c.value("activation_function", json("gelu_new"));  // transformers' GPT2Config default
  check(act.is_string(), "config.json: \"activation_function\" is ", act.dump(), ": expected a string");
  q["activation"] = activation_of(act.get<std::string>());
  // qkv's LayerNorm uses PyTorch's default epsilon, 1e-5, as GPT-2 does.
  const json eps = c.value("layer_norm_epsilon", json(1e-5));
  check(eps.is_number() && std::abs(eps.get<double>() - 1e-5) <= 1e-5 * 1e-6, "config.json: layer_norm_epsilon ",
        eps.dump(), " is not one qkv's LayerNorm honours: it uses 1e-5");
  q["norm"] = "pre";
  q["bias"] = true;
  q["dropout"] = 0.0;
  q["positions"] = "learned";
  q["scale_embedding"] = false;
  q["final_norm"] = true;
  q["tie_head"] = true;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (c.contains(key) && c.at(key).is_number() && c.at(key).get<double>() != 0.0) {
      notes.push_back(
          "dropout 0: config.json's resid_pdrop / embd_pdrop / attn_pdrop (training-time only) are not applied; to "
          "fine-tune with dropout, build the model from this config with \"dropout\" set, then load_weights");
      break;
    }
  return q.dump();
}

ImportedWeights pretrained(std::string_view config_text, SafetensorsFile file) {
  std::vector<std::string> notes;
  const std::string config = config_of(config_text, notes);
  ImportedWeights r = io::import_into(std::move(file), "gpt2", "language_model", config);
  r.notes.insert(r.notes.end(), notes.begin(), notes.end());
  return r;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  check(in.good(), p.string(), ": cannot read it");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<uint8_t> read_head(const fs::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary);
  check(in.good(), p.string(), ": cannot read it");
  std::vector<uint8_t> head(n);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(n));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

// model.safetensors.index.json's weight_map at `index_path`: each shard file (of this folder) and its tensors.
std::map<std::string, std::set<std::string>> shard_map(const fs::path& index_path) {
  return io::shard_map(read_text(index_path), index_path.string());
}

void check_shards(const fs::path& index_path, const std::vector<std::string>& missing) {
  io::check_shards(index_path.string(), missing);
}

// The shards read and joined into one file's tensors; every tensor of the index must be in the shard it names.
SafetensorsFile shards(const fs::path& dir, const fs::path& index_path) {
  SafetensorsFile all;
  std::vector<std::string> problems;
  for (auto& [f, names] : shard_map(index_path)) {
    SafetensorsFile part = read_safetensors((dir / f).string());
    for (auto& t : part.tensors) {
      if (!names.erase(t.name)) continue;  // a tensor the index does not name: not part of the model
      all.tensors.push_back(std::move(t));
    }
    for (const auto& n : names) problems.push_back(detail::cat("tensor \"", n, "\" is not in ", f));
  }
  check_shards(index_path, problems);
  return all;
}

// A folder's weights: model.safetensors, or the shards model.safetensors.index.json names.
struct FolderWeights {
  fs::path dir, file, index;  // file: model.safetensors, empty when sharded
  SafetensorsFile read() const { return file.empty() ? shards(dir, index) : read_safetensors(file.string()); }
};

// The folder's config.json and weights given to `use(config_text, FolderWeights)`; `tokenizer_files` (when not
// null) gets the tokenizer files found beside them. Errors start with the folder's path.
template <class Use>
auto from_folder(const std::string& dir, std::map<std::string, std::string>* tokenizer_files, Use&& use)
    -> decltype(use(std::string_view(), FolderWeights())) {
  const fs::path d(dir);
  std::error_code ec;
  check(fs::is_directory(d, ec), dir,
        ": not a folder: expected a model folder as the Hugging Face Hub serves it (config.json and "
        "model.safetensors)");
  const auto has = [&](const char* f) { return fs::is_regular_file(d / f, ec); };
  check(has("config.json"), dir, ": there is no config.json: expected a model folder as the Hugging Face Hub ",
        "serves it (config.json and model.safetensors)");
  const std::string config = read_text(d / "config.json");
  if (tokenizer_files)
    for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                          "special_tokens_map.json", "added_tokens.json"})
      if (has(f)) (*tokenizer_files)[f] = read_text(d / f);
  return io::with_path(dir, [&] {
    // The architecture first: a folder of another model_type is refused before its weights are read.
    std::vector<std::string> unused;
    config_of(config, unused);
    if (has("model.safetensors")) return use(config, FolderWeights{d, d / "model.safetensors", {}});
    if (has("model.safetensors.index.json"))
      return use(config, FolderWeights{d, {}, d / "model.safetensors.index.json"});
    if (has("pytorch_model.bin")) {
      // Its first bytes read as safetensors, which refuses a pickle with the line that converts it.
      io::with_path("pytorch_model.bin (there is no model.safetensors)",
                    [&] { parse_safetensors(read_head(d / "pytorch_model.bin", 16)); });
      throw Error("pytorch_model.bin (there is no model.safetensors) is neither a PyTorch pickle nor safetensors");
    }
    throw Error(
        "there is no model.safetensors (nor model.safetensors.index.json): the folder has no weights qkv reads");
  });
}

// The model streamed from the folder's model.safetensors, or from its shards one after another (PretrainedLoader's
// engine, io::ImportSink): every file's header read first, so that the whole plan is checked before any tensor's
// bytes are; memory is the model's weights and the reader's staging. `about` (when not null) gets the config and
// the notes.
std::unique_ptr<LanguageModel> streamed(std::string_view config_text, const FolderWeights& w,
                                        const OptimizerConfig& optimizer, Device device, ImportedWeights* about,
                                        PretrainedWeights weights) {
  std::vector<std::string> notes;
  const std::string config = config_of(config_text, notes);
  // The parameters' names and shapes first; the model's memory once the headers say how it is laid out.
  const io::Gpt2Layout layout = io::gpt2_layout(config);
  // Each file and the tensors it gives (none listed: all of them); their headers joined, in the order they stream.
  std::vector<std::pair<fs::path, std::set<std::string>>> files;
  if (w.file.empty())
    for (auto& [f, names] : shard_map(w.index)) files.emplace_back(w.dir / f, std::move(names));
  else
    files.emplace_back(w.file, std::set<std::string>{});
  SafetensorsHeader all;
  std::vector<std::string> order, problems;
  for (const auto& file : files) {
    // Plain references (not structured bindings), which every compiler lets a lambda capture.
    const fs::path& f = file.first;
    const std::set<std::string>& names = file.second;
    read_safetensors_stream(f.string(), [&](SafetensorsReader& reader) {
      std::set<std::string> left = names;
      for (const TensorInfo& t : reader.header().tensors)
        if (names.empty() || left.erase(t.name)) all.tensors.push_back(t), order.push_back(t.name);
      for (const auto& n : left)
        problems.push_back(detail::cat("tensor \"", n, "\" is not in ", f.filename().string()));
    });
  }
  check_shards(w.index, problems);
  io::Gpt2Target target = io::gpt2_target(layout, config, optimizer, all, &order, weights);
  std::unique_ptr<LanguageModel> m = std::move(target.model);
  const std::unique_ptr<io::ImportSink> sink = std::move(target.sink);
  for (const auto& file : files)
    read_safetensors_stream(file.first.string(), [&](SafetensorsReader& reader) {
      sink->bind(reader.header(), file.second.empty() ? nullptr : &file.second);
      reader.set_sink(sink.get());
    });
  std::vector<std::string> all_notes = sink->finish();
  all_notes.insert(all_notes.end(), notes.begin(), notes.end());
  if (about) {
    about->format = "gpt2";
    about->kind = "language_model";
    about->config_json = config;
    about->notes = std::move(all_notes);
  }
  if (device != Device::CPU) m->to(device);
  return m;
}

}  // namespace

namespace io {
std::string gpt2_config(std::string_view config_json, std::vector<std::string>& notes) {
  return config_of(config_json, notes);
}

std::map<std::string, std::set<std::string>> shard_map(std::string_view index_json, const std::string& where) {
  json index;
  try {
    index = json::parse(index_json);
  } catch (const json::exception& e) {
    throw Error(detail::cat(where, " is not valid JSON: ", e.what()));
  }
  check(index.is_object() && index.contains("weight_map") && index.at("weight_map").is_object(), where,
        ": expected an object with a \"weight_map\" of tensor names to shard files");
  std::map<std::string, std::set<std::string>> wanted;  // shard file -> its tensors
  for (const auto& [name, shard] : index.at("weight_map").items()) {
    check(shard.is_string(), where, ": weight_map[\"", name, "\"] is not a file name");
    const std::string f = shard.get<std::string>();
    check(f.find('/') == std::string::npos && f.find("..") == std::string::npos, where, ": shard \"", f,
          "\" is not a file of this folder");
    wanted[f].insert(name);
  }
  return wanted;
}

void check_shards(const std::string& where, const std::vector<std::string>& missing) {
  if (missing.empty()) return;
  std::string msg = where + ": ";
  for (size_t i = 0; i < missing.size(); ++i) msg += (i ? "; " : "") + missing[i];
  throw Error(msg);
}
}  // namespace io

ImportedWeights import_pretrained(std::string_view config_json, std::span<const uint8_t> weights) {
  return pretrained(config_json, parse_safetensors(weights));
}

ImportedWeights import_pretrained(const std::string& dir) {
  std::map<std::string, std::string> tokenizer_files;
  ImportedWeights r = from_folder(dir, &tokenizer_files, [](std::string_view config, const FolderWeights& w) {
    return pretrained(config, w.read());
  });
  r.tokenizer_files = std::move(tokenizer_files);
  return r;
}

PretrainedWeights pretrained_weights_from_string(const std::string& name, const char* argument) {
  if (name == "f32") return PretrainedWeights::F32;
  if (name == "keep") return PretrainedWeights::Keep;
  throw Error(detail::cat(argument, " = \"", name,
                          "\" is not a way to hold pretrained weights: expected \"f32\" (every tensor converted to "
                          "float32) or \"keep\" (F16 / BF16 matrices kept in half precision)"));
}

std::unique_ptr<LanguageModel> load_pretrained(const std::string& dir, const OptimizerConfig& optimizer, Device device,
                                               ImportedWeights* about, PretrainedWeights weights) {
  std::map<std::string, std::string> tokenizer_files;
  auto m = from_folder(dir, about ? &tokenizer_files : nullptr, [&](std::string_view config, const FolderWeights& w) {
    return streamed(config, w, optimizer, device, about, weights);
  });
  if (about) {
    about->weights = {};
    about->tokenizer_files = std::move(tokenizer_files);
  }
  return m;
}

std::unique_ptr<LanguageModel> load_pretrained(std::string_view config_json, std::span<const uint8_t> weights,
                                               const OptimizerConfig& optimizer, Device device,
                                               PretrainedWeights held) {
  // Streamed from the bytes: each tensor copied (or converted) once, straight into its parameter.
  PretrainedLoader loader(config_json, weights.size(), optimizer, held);
  loader.push(weights);
  std::unique_ptr<LanguageModel> m = loader.finish();
  if (device != Device::CPU) m->to(device);
  return m;
}

std::optional<Tokenizer> pretrained_tokenizer(const std::map<std::string, std::string>& files) {
  const auto text = [&](const char* name) -> const std::string* {
    const auto it = files.find(name);
    return it == files.end() ? nullptr : &it->second;
  };
  try {
    if (const std::string* t = text("tokenizer.json")) return Tokenizer::from_json(*t);
  } catch (const Error& e) {
    throw Error(std::string("tokenizer.json: ") + e.what());
  }
  const std::string *vocab = text("vocab.json"), *merges = text("merges.txt");
  if (!vocab && !merges) return std::nullopt;
  check(vocab && merges, "the folder has ", vocab ? "vocab.json" : "merges.txt", " but not ",
        vocab ? "merges.txt" : "vocab.json", ": GPT-2's older tokenizer needs both (or a tokenizer.json)");
  try {
    return Tokenizer::from_vocab_merges(*vocab, *merges);
  } catch (const Error& e) {
    throw Error(std::string("vocab.json + merges.txt: ") + e.what());
  }
}

std::optional<Tokenizer> pretrained_tokenizer(const std::string& dir) {
  const fs::path d(dir);
  check(fs::is_directory(d), dir, ": not a folder: expected a Hugging Face model folder");
  std::map<std::string, std::string> files;
  for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt"})
    if (fs::exists(d / f)) files[f] = read_text(d / f);
  try {
    return pretrained_tokenizer(files);
  } catch (const Error& e) {
    throw Error(dir + ": " + e.what());
  }
}

}  // namespace qkv
