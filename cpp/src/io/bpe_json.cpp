// Byte-level BPE's files: Hugging Face's tokenizer.json (read and written) and GPT-2's older vocab.json +
// merges.txt (read). Everything that would change the ids and is not implemented is refused by name
// rather than ignored: another model type, a normalizer, other pre-tokenizers or decoders, dropout,
// subword prefixes and suffixes, byte fallback, single_word added tokens, a post-processor that adds tokens.
#include <nlohmann/json.hpp>

#include "io/bpe.h"
#include "qkv/error.h"

namespace qkv::bpe {
namespace {

using nlohmann::json;

std::string shown(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

json parse(std::string_view text, const char* what) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(detail::cat(what, ": not valid JSON (malformed or truncated): ", e.what()));
  }
}

// The field `name` of object `j`, or nullptr when it is absent or null.
const json* optional_field(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool flag(const json& j, const char* name, const std::string& path, bool fallback) {
  const json* f = optional_field(j, name);
  if (!f) return fallback;
  check(f->is_boolean(), "tokenizer.json: field \"", path, ".", name, "\" = ", shown(*f),
        " has the wrong type: expected true or false");
  return f->get<bool>();
}

std::string type_of(const json& j, const std::string& path) {
  check(j.is_object(), "tokenizer.json: field \"", path, "\" = ", shown(j),
        " is not an object: expected {\"type\": ...}");
  const json* t = optional_field(j, "type");
  check(t && t->is_string(), "tokenizer.json: field \"", path,
        ".type\" is missing or not a string: expected a type name");
  return t->get<std::string>();
}

// An empty string or null: what the BPE model's prefix and suffix fields must be for byte-level BPE.
void none_or_empty(const json& model, const char* name) {
  const json* f = optional_field(model, name);
  check(!f || (f->is_string() && f->get<std::string>().empty()), "tokenizer.json: field \"model.", name,
        "\" = ", f ? shown(*f) : "",
        " is not supported: expected null or \"\" (byte-level BPE has no subword markers)");
}

void read_byte_level(const json& j, const std::string& path, Spec& spec) {
  spec.add_prefix_space = flag(j, "add_prefix_space", path, false);
  spec.use_regex = flag(j, "use_regex", path, true);
}

void read_vocab(const json& vocab, Spec& spec) {
  check(vocab.is_object(), "tokenizer.json: field \"model.vocab\" = ", shown(vocab),
        " has the wrong type: expected an object of token: id");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    check(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 30),
          "tokenizer.json: field \"model.vocab\": token ",
          json(token).dump(-1, ' ', false, json::error_handler_t::replace), " has id ", shown(id),
          ": expected a non-negative integer");
    spec.vocab.emplace_back(token, id.get<int32_t>());
  }
}

// A merge "a b" (one space: tokens of the byte-level alphabet hold none) or ["a", "b"].
std::pair<std::string, std::string> read_merge(const json& m, size_t i) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    check(
        space != std::string::npos && space > 0 && space + 1 < s.size() && s.find(' ', space + 1) == std::string::npos,
        "tokenizer.json: field \"model.merges[", i, "]\" = ", shown(m),
        " is malformed: expected two tokens separated by one space, \"a b\"");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), "tokenizer.json: field \"model.merges[",
        i, "]\" = ", shown(m), " is malformed: expected \"a b\" or [\"a\", \"b\"]");
  return {m[0].get<std::string>(), m[1].get<std::string>()};
}

}  // namespace

Spec spec_from_hf_json(const json& j) {
  check(j.is_object(), "tokenizer.json: the top level = ", shown(j), " is not an object: expected {\"model\": ...}");
  Spec spec;
  try {
    const json* model = optional_field(j, "model");
    check(model != nullptr, "tokenizer.json: field \"model\" is missing: expected the BPE model");
    const std::string type = type_of(*model, "model");
    check(type == "BPE", "tokenizer.json: field \"model.type\" = \"", type,
          "\" is not supported: expected \"BPE\" (byte-level BPE, GPT-2's)");
    const json* vocab = optional_field(*model, "vocab");
    check(vocab != nullptr, "tokenizer.json: field \"model.vocab\" is missing: expected an object of token: id");
    read_vocab(*vocab, spec);
    const json* merges = optional_field(*model, "merges");
    check(merges && merges->is_array(), "tokenizer.json: field \"model.merges\" is missing or not an array: expected ",
          "[\"a b\", ...] or [[\"a\", \"b\"], ...]");
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) spec.merges.push_back(read_merge((*merges)[i], i));
    if (const json* d = optional_field(*model, "dropout"))
      check(d->is_number() && d->get<double>() == 0.0, "tokenizer.json: field \"model.dropout\" = ", shown(*d),
            " is not supported: expected null (BPE dropout makes encoding random)");
    if (const json* u = optional_field(*model, "unk_token")) {
      check(u->is_string(), "tokenizer.json: field \"model.unk_token\" = ", shown(*u),
            " has the wrong type: expected a string or null");
      spec.unk_token = u->get<std::string>();
    }
    none_or_empty(*model, "continuing_subword_prefix");
    none_or_empty(*model, "end_of_word_suffix");
    check(!flag(*model, "byte_fallback", "model", false),
          "tokenizer.json: field \"model.byte_fallback\" = true is not supported: expected false (byte-level BPE ",
          "has every byte in its vocabulary)");
    spec.ignore_merges = flag(*model, "ignore_merges", "model", false);

    const json* pre = optional_field(j, "pre_tokenizer");
    check(pre != nullptr,
          "tokenizer.json: field \"pre_tokenizer\" is missing or null: expected {\"type\": \"ByteLevel\"}");
    const std::string pre_type = type_of(*pre, "pre_tokenizer");
    if (pre_type == "Sequence") {
      const json* list = optional_field(*pre, "pretokenizers");
      check(list && list->is_array() && list->size() == 1 &&
                type_of((*list)[0], "pre_tokenizer.pretokenizers[0]") == "ByteLevel",
            "tokenizer.json: field \"pre_tokenizer.pretokenizers\" = ", list ? shown(*list) : "null",
            " is not supported: expected a Sequence of one ByteLevel pre-tokenizer");
      read_byte_level((*list)[0], "pre_tokenizer.pretokenizers[0]", spec);
    } else {
      check(pre_type == "ByteLevel", "tokenizer.json: field \"pre_tokenizer.type\" = \"", pre_type,
            "\" is not supported: expected \"ByteLevel\" (or a Sequence of it)");
      read_byte_level(*pre, "pre_tokenizer", spec);
    }
    if (const json* n = optional_field(j, "normalizer"))
      throw Error(detail::cat("tokenizer.json: field \"normalizer\" = ", shown(*n),
                              " is not supported: expected null (byte-level BPE reads the text as it is)"));
    // Hugging Face cuts (truncation) or fills (padding) the ids these ask for: qkv encodes a text whole.
    for (const char* f : {"truncation", "padding"})
      if (const json* x = optional_field(j, f))
        throw Error(detail::cat("tokenizer.json: field \"", f, "\" = ", shown(*x),
                                " is not supported: expected null (qkv encodes each text whole, with no ", f, ")"));
    const json* dec = optional_field(j, "decoder");
    check(dec != nullptr, "tokenizer.json: field \"decoder\" is missing or null: expected {\"type\": \"ByteLevel\"}");
    const std::string dec_type = type_of(*dec, "decoder");
    check(dec_type == "ByteLevel", "tokenizer.json: field \"decoder.type\" = \"", dec_type,
          "\" is not supported: expected \"ByteLevel\"");
    if (const json* post = optional_field(j, "post_processor")) {
      const std::string post_type = type_of(*post, "post_processor");
      check(
          post_type == "ByteLevel", "tokenizer.json: field \"post_processor.type\" = \"", post_type,
          "\" is not supported: expected \"ByteLevel\" or null (a post-processor that adds tokens is not implemented)");
    }

    if (const json* added = optional_field(j, "added_tokens")) {
      check(added->is_array(), "tokenizer.json: field \"added_tokens\" = ", shown(*added),
            " has the wrong type: expected an array");
      for (size_t i = 0; i < added->size(); ++i) {
        const json& a = (*added)[i];
        const std::string path = detail::cat("added_tokens[", i, "]");
        check(a.is_object(), "tokenizer.json: field \"", path, "\" = ", shown(a), " is not an object");
        const json* id = optional_field(a, "id");
        const json* content = optional_field(a, "content");
        check(id && id->is_number_integer() && id->get<int64_t>() >= 0 && id->get<int64_t>() < (int64_t{1} << 30),
              "tokenizer.json: field \"", path, ".id\" = ", id ? shown(*id) : "null",
              ": expected a non-negative integer");
        check(content && content->is_string(), "tokenizer.json: field \"", path,
              ".content\" is missing or not a string: expected the token's text");
        check(!flag(a, "single_word", path, false), "tokenizer.json: field \"", path,
              ".single_word\" = true is not supported: expected false");
        AddedToken t;
        t.id = id->get<int32_t>();
        t.content = content->get<std::string>();
        t.special = flag(a, "special", path, false);
        t.lstrip = flag(a, "lstrip", path, false);
        t.rstrip = flag(a, "rstrip", path, false);
        t.normalized = flag(a, "normalized", path, !t.special);
        spec.added.push_back(std::move(t));
      }
    }
  } catch (const json::exception& e) {
    throw Error(detail::cat("tokenizer.json: ", e.what()));
  }
  return spec;
}

Spec spec_from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt) {
  const json vocab = parse(vocab_json, "vocab.json");
  Spec spec;
  try {
    check(vocab.is_object(), "vocab.json: the top level = ", shown(vocab), " is not an object: expected {token: id}");
    read_vocab(vocab, spec);
  } catch (const Error& e) {
    // The checks above name tokenizer.json's field; here the file is vocab.json.
    std::string m = e.what();
    const std::string from = "tokenizer.json: field \"model.vocab\"";
    if (m.rfind(from, 0) == 0) m = "vocab.json" + m.substr(from.size());
    throw Error(m);
  }
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges_txt.size();) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no;
    pos = end + 1;
    // The first line of GPT-2's file is "#version: 0.2"; empty lines (the final newline) carry nothing.
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    check(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
              line.find(' ', space + 1) == std::string_view::npos,
          "merges.txt: line ", line_no, " = \"", line.substr(0, 60),
          "\" is malformed: expected two tokens separated by one space");
    spec.merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  // GPT-2's <|endoftext|> is a plain vocab.json entry; Hugging Face's GPT-2 tokenizers (tokenizer.json, and
  // transformers' GPT2Tokenizer) treat it as a special token, so it is one here too when present.
  for (const auto& [token, id] : spec.vocab)
    if (token == "<|endoftext|>") spec.added.push_back({id, token, true, false, false, false});
  return spec;
}

std::string to_hf_json(const Spec& spec) {
  // The layout `tokenizers` writes (field order included), so that Hugging Face's implementations load it.
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  auto added = nlohmann::ordered_json::array();
  for (const AddedToken& a : spec.added) {
    nlohmann::ordered_json t;
    t["id"] = a.id;
    t["content"] = a.content;
    t["single_word"] = false;
    t["lstrip"] = a.lstrip;
    t["rstrip"] = a.rstrip;
    t["normalized"] = a.normalized;
    t["special"] = a.special;
    added.push_back(std::move(t));
  }
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;
  const auto byte_level = [&](bool prefix) {
    nlohmann::ordered_json b;
    b["type"] = "ByteLevel";
    b["add_prefix_space"] = prefix;
    b["trim_offsets"] = true;
    b["use_regex"] = spec.use_regex;
    return b;
  };
  j["pre_tokenizer"] = byte_level(spec.add_prefix_space);
  j["post_processor"] = byte_level(spec.add_prefix_space);
  j["decoder"] = byte_level(spec.add_prefix_space);
  nlohmann::ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = spec.unk_token ? nlohmann::ordered_json(*spec.unk_token) : nlohmann::ordered_json(nullptr);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = spec.ignore_merges;
  // In id order, as the Rust crate writes it.
  std::vector<std::pair<std::string, int32_t>> vocab = spec.vocab;
  std::sort(vocab.begin(), vocab.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  for (const auto& [token, id] : vocab) v[token] = id;
  model["vocab"] = std::move(v);
  auto merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : spec.merges) merges.push_back({a, b});
  model["merges"] = std::move(merges);
  j["model"] = std::move(model);
  return j.dump();
}

}  // namespace qkv::bpe
