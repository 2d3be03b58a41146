// import_model (qkv/import.h): a state dict streamed from its file into the model, tensor by tensor. Every
// fixture's model equals, bit for bit, the one import_file + load_weights builds (the whole-file path), with the same
// report; the files it cannot stream (seed 004's expansion, nanoGPT's untied head) are mapped whole, with the same
// result; a file that does not fit or ends early is refused as import_file refuses it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::import_model_test {
namespace {

namespace fs = std::filesystem;
using test::message_of;

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

std::string fixture(const std::string& name) {
  return std::string(QKV_FIXTURES_DIR) + "/import/" + name + ".safetensors";
}

// The whole-file path: import_file maps the parsed file, load_weights takes the result into a model of its kind.
std::unique_ptr<Model> whole(const std::string& path, const ImportOptions& o, ImportedWeights& r) {
  r = import_file(path, o);
  std::unique_ptr<Model> m;
  if (r.kind == "seq2seq")
    m = std::make_unique<Seq2Seq>(seq2seq_config_from_json(r.config_json));
  else if (r.kind == "classifier")
    m = std::make_unique<Classifier>(classifier_config_from_json(r.config_json));
  else
    m = std::make_unique<LanguageModel>(language_model_config_from_json(r.config_json));
  m->load_weights(r.weights);
  return m;
}

void write(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(ImportModel, StreamsEveryFormatBitForBitAsTheWholeFileImport) {
  struct Case {
    const char* name;
    int heads;
    const char* from;
  };
  // nanoGPT with and without biases (Copy, CopyOrZeros -> zeros), the seeds' stacked W_q|W_k|W_v (Stack3) and
  // position tables (checked by value), seed 004's expansion (mapped whole), the tutorial's torch names.
  for (const Case c :
       {Case{"nanogpt_bias", 4, "auto"}, Case{"nanogpt_nobias", 4, "auto"}, Case{"seed000_encoder", 2, "auto"},
        Case{"seed002_transformer", 4, "auto"}, Case{"seed003_classifier", 4, "auto"},
        Case{"seed004_transformer", 0, "auto"}, Case{"torch_seq2seq_tutorial", 4, "torch"}}) {
    ImportOptions o;
    o.heads = c.heads;
    o.from = c.from;
    ImportedWeights r, about;
    const auto reference = whole(fixture(c.name), o, r);
    const auto streamed = import_model(fixture(c.name), o, &about);
    test::expect_same_parameters(*streamed, *reference, c.name);
    EXPECT_EQ(about.format, r.format) << c.name;
    EXPECT_EQ(about.kind, r.kind) << c.name;
    EXPECT_EQ(about.config_json, r.config_json) << c.name;
    EXPECT_EQ(about.notes, r.notes) << c.name;
    EXPECT_TRUE(about.weights.empty()) << c.name;
  }
}

// nanoGPT's head: tied when lm_head.weight holds the embedding's bytes (streamed), its own weight otherwise (the
// model is then built untied: mapped whole, as import_file does).
TEST(ImportModel, ANanoGptHeadOfItsOwnIsImportedUntied) {
  const auto f = read_safetensors(fixture("nanogpt_bias"));  // lm_head.weight equal to transformer.wte.weight
  std::vector<std::vector<float>> keep;
  keep.reserve(f.tensors.size());
  std::vector<TensorRef> refs;
  for (const auto& t : f.tensors) {
    keep.push_back(f.floats(t.name));
    if (t.name == "lm_head.weight") keep.back()[3] += 0.25f;
    refs.emplace_back(t.name, t.shape, std::span<const float>(keep.back()));
  }
  const fs::path p = fs::temp_directory_path() / "qkv_import_model_untied.safetensors";
  write(p, serialize_safetensors(refs, {}));
  ImportOptions o;
  o.heads = 4;
  ImportedWeights r, about;
  const auto reference = whole(p.string(), o, r);
  const auto streamed = import_model(p.string(), o, &about);
  fs::remove(p);
  EXPECT_NE(r.config_json.find("\"tie_head\":false"), std::string::npos) << r.config_json;
  EXPECT_EQ(about.config_json, r.config_json);
  test::expect_same_parameters(*streamed, *reference, "untied nanoGPT");
}

TEST(ImportModel, RefusesAsImportFileDoes) {
  const fs::path p = fs::temp_directory_path() / "qkv_import_model_bad.safetensors";
  // Cut short: the header checked against the file's size names it.
  auto bytes = io::read_file(fixture("nanogpt_bias"));
  bytes.resize(bytes.size() - 64);
  write(p, bytes);
  ImportOptions o;
  o.heads = 4;
  const std::string cut = message_of([&] { import_model(p.string(), o); });
  EXPECT_HAS(cut, p.string());
  EXPECT_HAS(cut, "truncated file?");
  // A tensor missing and one mis-shaped: named at once, with the path, as import_file names them.
  const auto f = read_safetensors(fixture("nanogpt_bias"));
  std::vector<std::vector<float>> keep;
  keep.reserve(f.tensors.size());
  std::vector<TensorRef> refs;
  for (const auto& t : f.tensors) {
    if (t.name == "transformer.h.1.mlp.c_proj.bias") continue;
    keep.push_back(f.floats(t.name));
    auto shape = t.shape;
    if (t.name == "transformer.h.0.ln_2.weight") keep.back().pop_back(), shape[0] -= 1;
    refs.emplace_back(t.name, shape, std::span<const float>(keep.back()));
  }
  write(p, serialize_safetensors(refs, {}));
  const std::string streamed = message_of([&] { import_model(p.string(), o); });
  const std::string mapped = message_of([&] { import_file(p.string(), o); });
  fs::remove(p);
  EXPECT_EQ(streamed, mapped);
  EXPECT_HAS(streamed, "tensor \"transformer.h.1.mlp.c_proj.bias\" is missing");
  EXPECT_HAS(streamed, "tensor \"transformer.h.0.ln_2.weight\" has shape (15)");
  // A pickle.
  EXPECT_HAS(message_of([&] { import_model(std::string(QKV_FIXTURES_DIR) + "/import/missing.pt", o); }), "missing.pt");
}

}  // namespace
}  // namespace qkv::import_model_test
