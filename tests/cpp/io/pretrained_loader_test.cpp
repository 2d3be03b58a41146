// GPT-2 folders streamed into the model (qkv/pretrained_loader.h; load_pretrained): the same parameters, bit for bit,
// as the whole-file import (import_pretrained + load_weights), whatever the pieces the file arrives in, and the
// same refusals, each named: the header's problems before any tensor's bytes are taken, the values' at the end.
#include "qkv/pretrained_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "test_util.h"

namespace qkv::pretrained_loader_test {
namespace {

namespace fs = std::filesystem;
using test::message_of;

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

std::string dir_of(const std::string& c) { return std::string(QKV_FIXTURES_DIR) + "/import/gpt2_" + c; }
std::string config_of(const std::string& c) {
  const auto b = io::read_file(dir_of(c) + "/config.json");
  return {b.begin(), b.end()};
}
std::vector<uint8_t> weights_of(const std::string& c) { return io::read_file(dir_of(c) + "/model.safetensors"); }

// The whole-file import's model: import_pretrained maps the parsed file, load_weights takes the result.
std::unique_ptr<LanguageModel> whole(const std::string& c, ImportedWeights& r) {
  r = import_pretrained(dir_of(c));
  auto m = std::make_unique<LanguageModel>(language_model_config_from_json(r.config_json));
  m->load_weights(r.weights);
  return m;
}

// The file pushed through a loader in pieces of `piece` bytes (buffer/commit, as the browser's chunks come).
std::unique_ptr<LanguageModel> in_pieces(PretrainedLoader& loader, const std::vector<uint8_t>& file, size_t piece) {
  for (size_t at = 0; at < file.size();) {
    const std::span<uint8_t> to = loader.buffer();
    if (to.empty()) break;
    const size_t n = std::min({to.size(), piece, file.size() - at});
    std::memcpy(to.data(), file.data() + at, n);
    loader.commit(n);
    at += n;
  }
  return loader.finish();
}
std::unique_ptr<LanguageModel> in_pieces(const std::string& config, const std::vector<uint8_t>& file, size_t piece,
                                         std::optional<uint64_t> total) {
  PretrainedLoader loader(config, total);
  return in_pieces(loader, file, piece);
}

TEST(PretrainedLoader, StreamsEveryFixtureBitForBitAsTheWholeFileImport) {
  // Both layouts (bare names, "transformer." with lm_head), F16, BF16, with and without buffers.
  for (const std::string c : {"hub", "lmhead", "f16", "bf16", "gelu", "tok"}) {
    ImportedWeights r;
    const auto reference = whole(c, r);
    ImportedWeights about;
    const auto folder = load_pretrained(dir_of(c), {}, Device::CPU, &about);
    test::expect_same_parameters(*folder, *reference, c + " (load_pretrained(dir))");
    EXPECT_EQ(about.config_json, r.config_json) << c;
    EXPECT_EQ(about.notes, r.notes) << c;
    EXPECT_EQ(about.format, "gpt2");
    EXPECT_TRUE(about.weights.empty()) << c << ": the weights are in the model";
    const auto bytes = load_pretrained(config_of(c), weights_of(c));
    test::expect_same_parameters(*bytes, *reference, c + " (load_pretrained(config, bytes))");
    // Pieces of 1, 7 and 1000 bytes: headers, elements and Conv1D rows split anywhere; size known or not.
    const auto file = weights_of(c);
    for (const size_t piece : {size_t{1}, size_t{7}, size_t{1000}}) {
      PretrainedLoader l(config_of(c), piece == 7 ? std::nullopt : std::optional<uint64_t>(file.size()));
      const auto m = in_pieces(l, file, piece);
      test::expect_same_parameters(*m, *reference, c + " in pieces of " + std::to_string(piece));
      EXPECT_EQ(l.notes(), r.notes) << c;
      EXPECT_EQ(l.config_json(), r.config_json) << c;
      EXPECT_EQ(l.received(), file.size());
    }
  }
}

TEST(PretrainedLoader, ATruncatedFileIsRefused) {
  auto w = weights_of("hub");
  w.resize(w.size() - 100);
  const std::string config = config_of("hub");
  // Size unknown (a stream): the end says how much is missing.
  const std::string unknown = message_of([&] { in_pieces(config, w, 4096, std::nullopt); });
  EXPECT_HAS(unknown, "truncated?");
  EXPECT_HAS(unknown, std::to_string(w.size()));
  // Size known: the header is checked against it before any tensor.
  EXPECT_HAS(message_of([&] { in_pieces(config, w, 4096, w.size()); }), "truncated file?");
  EXPECT_HAS(message_of([&] { load_pretrained(config, w); }), "truncated file?");
  // Cut inside the header.
  const std::vector<uint8_t> head(w.begin(), w.begin() + 20);
  EXPECT_HAS(message_of([&] { in_pieces(config, head, 4096, std::nullopt); }), "truncated?");
  // A folder: the message names the file.
  const fs::path d = fs::temp_directory_path() / "qkv_pretrained_loader_truncated";
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(dir_of("hub") + "/config.json", d / "config.json");
  std::ofstream(d / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size()));
  const std::string e = message_of([&] { load_pretrained(d.string()); });
  fs::remove_all(d);
  EXPECT_HAS(e, (d / "model.safetensors").string());
  EXPECT_HAS(e, "truncated file?");
  // Bytes past the end.
  auto longer = weights_of("hub");
  longer.push_back(0);
  EXPECT_HAS(message_of([&] { load_pretrained(config, longer); }), "expected no bytes after the last tensor");
}

// The edited fixture: `edit` gets each tensor's name, values and shape, returns false to drop it; `order` puts
// the named tensors first in the file.
using Edit = std::function<bool(const std::string&, std::vector<float>&, std::vector<int64_t>&)>;
std::vector<uint8_t> edited(const std::string& c, const Edit& edit, const std::vector<std::string>& first = {}) {
  const auto f = read_safetensors(dir_of(c) + "/model.safetensors");
  std::vector<std::vector<float>> keep;
  std::vector<std::vector<int64_t>> shapes;
  keep.reserve(f.tensors.size());
  shapes.reserve(f.tensors.size());
  std::vector<TensorRef> front, back;
  for (const auto& t : f.tensors) {
    keep.push_back(f.floats(t.name));
    shapes.push_back(t.shape);
    if (!edit(t.name, keep.back(), shapes.back())) continue;
    const bool early = std::find(first.begin(), first.end(), t.name) != first.end();
    (early ? front : back).emplace_back(t.name, shapes.back(), std::span<const float>(keep.back()));
  }
  front.insert(front.end(), back.begin(), back.end());
  return serialize_safetensors(front, {});
}

// The header's problems, every one at once, before a tensor's byte is taken: the commit that completes the header
// throws.
TEST(PretrainedLoader, TheHeadersProblemsAreNamedAtOnceBeforeAnyTensor) {
  const auto bytes = edited("lmhead", [](const std::string& n, std::vector<float>&, std::vector<int64_t>& shape) {
    if (n == "transformer.h.1.mlp.c_fc.weight" || n == "transformer.ln_f.bias") return false;
    if (n == "transformer.h.0.attn.c_attn.weight") std::swap(shape[0], shape[1]);
    return true;
  });
  PretrainedLoader loader(config_of("lmhead"), bytes.size());
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  std::string e;
  try {
    loader.push(bytes);
  } catch (const Error& x) {
    e = x.what();
  }
  EXPECT_EQ(loader.received(), 8 + header) << "refused at the header's end, before any tensor's bytes";
  EXPECT_HAS(e, "the file (format gpt2) does not fit this language_model");
  EXPECT_HAS(e, "tensor \"transformer.h.1.mlp.c_fc.weight\" is missing");
  EXPECT_HAS(e, "tensor \"transformer.ln_f.bias\" is missing");
  EXPECT_HAS(e, "tensor \"transformer.h.0.attn.c_attn.weight\" has shape (48, 16), expected (16, 48)");
  // config.json is judged before any byte: another architecture is refused by the constructor.
  EXPECT_HAS(message_of([] { PretrainedLoader l(R"({"model_type": "llama"})"); }),
             "model_type \"llama\" is an architecture qkv does not run");
}

// A lm_head.weight equal to wte.weight loads tied, wherever it lies in the file; one that differs is refused,
// whether it comes before the embedding (it is written, then the embedding compared) or after (compared).
TEST(PretrainedLoader, TheTiedHeadIsCheckedInEitherOrder) {
  ImportedWeights r;
  const auto reference = whole("lmhead", r);
  for (const bool head_first : {true, false}) {
    const std::vector<std::string> first =
        head_first ? std::vector<std::string>{"lm_head.weight"} : std::vector<std::string>{"transformer.wte.weight"};
    const auto same = edited(
        "lmhead", [](const std::string&, std::vector<float>&, std::vector<int64_t>&) { return true; }, first);
    PretrainedLoader l(config_of("lmhead"), same.size());
    const auto m = in_pieces(l, same, 333);
    test::expect_same_parameters(*m, *reference, head_first ? "head first" : "head last");
    EXPECT_EQ(l.notes(), r.notes);
    for (const int at : {0, 5, 16 * 61 - 1}) {  // the first, a middle and the last value of the (61, 16) head
      const auto differs = edited(
          "lmhead",
          [&](const std::string& n, std::vector<float>& v, std::vector<int64_t>&) {
            if (n == "lm_head.weight") v[static_cast<size_t>(at)] += 0.5f;
            return true;
          },
          first);
      EXPECT_HAS(message_of([&] { in_pieces(config_of("lmhead"), differs, 333, differs.size()); }),
                 "tensor \"lm_head.weight\" differs from \"transformer.wte.weight\": GPT-2 ties its head");
    }
  }
  // Of another shape: refused with the header.
  const auto narrow = edited("lmhead", [](const std::string& n, std::vector<float>& v, std::vector<int64_t>& s) {
    if (n == "lm_head.weight") s[0] -= 1, v.resize(v.size() - 16);
    return true;
  });
  EXPECT_HAS(message_of([&] { load_pretrained(config_of("lmhead"), narrow); }),
             "tensor \"lm_head.weight\" differs from \"transformer.wte.weight\"");
}

TEST(PretrainedLoader, BuffersAreCheckedAsTheyPass) {
  const auto bytes = edited("hub", [](const std::string& n, std::vector<float>& v, std::vector<int64_t>&) {
    if (n == "h.1.attn.bias") v[1] = 1.f;  // row 0 sees position 1: not causal
    if (n == "h.0.attn.masked_bias") v[0] = 5.f;
    return true;
  });
  const std::string e = message_of([&] { in_pieces(config_of("hub"), bytes, 100, bytes.size()); });
  EXPECT_HAS(e, "tensor \"h.1.attn.bias\" (F32 (1, 1, 16, 16)) is not GPT-2's causal mask");
  EXPECT_HAS(e, "tensor \"h.0.attn.masked_bias\" (F32 ()) is not GPT-2's masked_bias");
}

}  // namespace
}  // namespace qkv::pretrained_loader_test

namespace qkv::pretrained_loader_test {
namespace {

// `c`'s tensors split into two shards (those `second` picks in the second) with the index naming them.
void write_sharded(const fs::path& d, const std::string& c, const std::function<bool(const std::string&)>& second,
                   const std::function<void(nlohmann::json&)>& edit_map = {}) {
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(dir_of(c) + "/config.json", d / "config.json");
  const auto f = read_safetensors(dir_of(c) + "/model.safetensors");
  std::vector<std::vector<float>> keep;
  keep.reserve(f.tensors.size());
  std::vector<TensorRef> parts[2];
  nlohmann::json map;
  for (const auto& t : f.tensors) {
    const int s = second(t.name) ? 1 : 0;
    keep.push_back(f.floats(t.name));
    parts[s].emplace_back(t.name, t.shape, std::span<const float>(keep.back()));
    map[t.name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  if (edit_map) edit_map(map);
  for (int s = 0; s < 2; ++s) {
    const auto bytes = serialize_safetensors(parts[s], {{"format", "pt"}});
    std::ofstream(d / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::ofstream(d / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
}

// Shards stream one after another into the same model: bit for bit the single file's, a tied head compared across
// files (lm_head.weight in the first shard, transformer.wte.weight in the second), a tensor missing from the shard
// the index names refused with the index's path.
TEST(PretrainedLoader, ShardsStreamOneAfterAnother) {
  const fs::path d = fs::temp_directory_path() / "qkv_pretrained_loader_shards";
  for (const std::string c : {"hub", "lmhead"}) {
    ImportedWeights r;
    const auto reference = whole(c, r);
    write_sharded(d, c, [](const std::string& n) {
      return n.find("h.1.") != std::string::npos || n.find("wte") != std::string::npos;
    });
    ImportedWeights about;
    const auto m = load_pretrained(d.string(), {}, Device::CPU, &about);
    test::expect_same_parameters(*m, *reference, c + " sharded");
    EXPECT_EQ(about.notes, r.notes) << c;
  }
  // The head in the first shard differs from the embedding in the second.
  write_sharded(d, "lmhead", [](const std::string& n) { return n.find("wte") != std::string::npos; });
  {
    auto f = read_safetensors((d / "model-00001-of-00002.safetensors").string());
    std::vector<std::vector<float>> keep;
    keep.reserve(f.tensors.size());
    std::vector<TensorRef> refs;
    for (const auto& t : f.tensors) {
      keep.push_back(f.floats(t.name));
      if (t.name == "lm_head.weight") keep.back()[7] = -keep.back()[7] + 1.f;
      refs.emplace_back(t.name, t.shape, std::span<const float>(keep.back()));
    }
    const auto bytes = serialize_safetensors(refs, {{"format", "pt"}});
    std::ofstream(d / "model-00001-of-00002.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_HAS(message_of([&] { load_pretrained(d.string()); }),
             "tensor \"lm_head.weight\" differs from \"transformer.wte.weight\": GPT-2 ties its head");
  // The index places wte.weight in a shard that lacks it.
  write_sharded(
      d, "hub", [](const std::string& n) { return n.find("h.1.") != std::string::npos; },
      [](nlohmann::json& map) { map["wte.weight"] = "model-00002-of-00002.safetensors"; });
  const std::string e = message_of([&] { load_pretrained(d.string()); });
  fs::remove_all(d);
  EXPECT_HAS(e, "model.safetensors.index.json: tensor \"wte.weight\" is not in model-00002-of-00002.safetensors");
}

// The shards' files as the package streams them (PretrainedLoader's sharded constructor): each shard's first bytes
// given first (here its header and 3 bytes beyond), then the files one after another in pieces of any size: bit for
// bit the single file's model; the refusals name the shard or the index.
std::vector<PretrainedShard> heads_of(const fs::path& d, const std::vector<std::string>& files) {
  std::vector<PretrainedShard> heads;
  for (const auto& f : files) {
    auto bytes = io::read_file((d / f).string());
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    bytes.resize(8 + n + 3);
    heads.push_back({f, std::move(bytes)});
  }
  return heads;
}
std::string text_of(const fs::path& p) {
  const auto b = io::read_file(p.string());
  return {b.begin(), b.end()};
}
std::vector<uint8_t> joined(const fs::path& d, const std::vector<std::string>& files) {
  std::vector<uint8_t> all;
  for (const auto& f : files) {
    const auto b = io::read_file((d / f).string());
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

TEST(PretrainedLoader, ShardsStreamThroughOneLoaderGivenTheirHeadersFirst) {
  const fs::path d = fs::temp_directory_path() / "qkv_pretrained_loader_shard_stream";
  const std::string one = "model-00001-of-00002.safetensors", two = "model-00002-of-00002.safetensors";
  for (const std::string c : {"hub", "lmhead"}) {
    ImportedWeights r;
    const auto reference = whole(c, r);
    write_sharded(d, c, [](const std::string& n) {
      return n.find("h.1.") != std::string::npos || n.find("wte") != std::string::npos;
    });
    const std::string index = text_of(d / "model.safetensors.index.json");
    // Either order of the shards: the plan follows the order given.
    for (const auto& order : {std::vector<std::string>{one, two}, std::vector<std::string>{two, one}}) {
      const std::vector<uint8_t> bytes = joined(d, order);
      for (const size_t piece : {size_t{7}, size_t{1000}, bytes.size()}) {
        PretrainedLoader loader(config_of(c), index, heads_of(d, order));
        ASSERT_EQ(loader.total(), bytes.size());
        const auto m = in_pieces(loader, bytes, piece);
        EXPECT_EQ(loader.received(), bytes.size());
        EXPECT_TRUE(loader.buffer().empty());
        test::expect_same_parameters(*m, *reference, c + " sharded, pieces of " + std::to_string(piece));
        EXPECT_EQ(loader.notes(), r.notes) << c;
      }
    }
  }
  const std::string config = config_of("hub"), index = text_of(d / "model.safetensors.index.json");
  const std::vector<uint8_t> bytes = joined(d, {one, two});
  // Every shard the index names must be given, once, before any bytes.
  EXPECT_HAS(message_of([&] { PretrainedLoader(config, index, heads_of(d, {one})); }),
             "model.safetensors.index.json: the shard " + two + " is not given");
  EXPECT_HAS(message_of([&] {
               auto h = heads_of(d, {one, two});
               h.push_back(h[0]);
               PretrainedLoader(config, index, h);
             }),
             "the shard " + one + " is given twice");
  EXPECT_HAS(message_of([&] {
               auto h = heads_of(d, {one, two});
               h[1].file = "model.safetensors";
               PretrainedLoader(config, index, h);
             }),
             "the shard model.safetensors is not one model.safetensors.index.json names");
  EXPECT_HAS(message_of([&] { PretrainedLoader(config, "{\"weight_map\": {}}", {}); }),
             "model.safetensors.index.json: its weight_map names no tensor");
  EXPECT_HAS(message_of([&] {
               auto h = heads_of(d, {one, two});
               h[0].head.resize(20);
               PretrainedLoader(config, index, h);
             }),
             one + ": ");
  // The streamed file ends early: finish names the shard it ended in.
  {
    PretrainedLoader loader(config, index, heads_of(d, {one, two}));
    std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 10);
    EXPECT_HAS(message_of([&] { in_pieces(loader, cut, 1000); }), two + ": safetensors: the file ended after");
  }
  {
    PretrainedLoader loader(config, index, heads_of(d, {one, two}));
    const size_t first = io::read_file((d / one).string()).size();
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(first));
    EXPECT_HAS(message_of([&] { in_pieces(loader, cut, 1000); }),
               two + ": safetensors: the file ended after 0 of the 8 bytes its header needs");
  }
  // A shard whose bytes do not start with the header given for it.
  {
    PretrainedLoader loader(config, index, heads_of(d, {one, two}));
    EXPECT_HAS(message_of([&] {
                 in_pieces(loader, joined(d, {two, one}), 1000);
               }),
               one + ": its header is not the one given before its bytes");
  }
  // The index places wte.weight in a shard that lacks it: refused from the headers, before any bytes.
  write_sharded(
      d, "hub", [](const std::string& n) { return n.find("h.1.") != std::string::npos; },
      [](nlohmann::json& map) { map["wte.weight"] = "model-00002-of-00002.safetensors"; });
  const std::string e = message_of([&] {
    PretrainedLoader(config, text_of(d / "model.safetensors.index.json"), heads_of(d, {one, two}));
  });
  fs::remove_all(d);
  EXPECT_HAS(e, "model.safetensors.index.json: tensor \"wte.weight\" is not in model-00002-of-00002.safetensors");
}

}  // namespace
}  // namespace qkv::pretrained_loader_test
