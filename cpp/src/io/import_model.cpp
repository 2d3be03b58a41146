// import_model (qkv/import.h): a state dict streamed from its file into a model built from its header.
#include <algorithm>
#include <fstream>
#include <map>
#include <span>

#include "io/checkpoint.h"
#include "io/import.h"
#include "io/import_buffers.h"
#include "io/import_sink.h"
#include "nn/parameters.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/seq2seq.h"

namespace qkv {
namespace {

// A model of `kind` for the import to write into: no initial values, no training state (as a loader builds it).
std::unique_ptr<Model> build(const std::string& kind, const std::string& config, int& heads) {
  const nn::Parameters::ForLoading loading;
  if (kind == "seq2seq") {
    auto m = std::make_unique<Seq2Seq>(seq2seq_config_from_json(config));
    heads = m->config().heads;
    return m;
  }
  if (kind == "classifier") {
    auto m = std::make_unique<Classifier>(classifier_config_from_json(config));
    heads = m->config().heads;
    return m;
  }
  check(kind == "language_model", "import: the file holds a \"", kind, "\", which qkv cannot import");
  auto m = std::make_unique<LanguageModel>(language_model_config_from_json(config));
  heads = m->config().heads;
  return m;
}

// Whether the file's tensors a and b hold the same bytes, read a MiB of each at a time.
bool same_bytes(const std::string& path, const TensorInfo& a, const TensorInfo& b) {
  if (a.size() != b.size()) return false;
  std::ifstream in(path, std::ios::binary);
  std::vector<char> x(1 << 20), y(1 << 20);
  for (uint64_t at = 0; at < a.size(); at += x.size()) {
    const auto n = static_cast<std::streamsize>(std::min<uint64_t>(x.size(), a.size() - at));
    in.seekg(static_cast<std::streamoff>(a.begin + at)).read(x.data(), n);
    in.seekg(static_cast<std::streamoff>(b.begin + at)).read(y.data(), n);
    check(in.good(), "cannot read bytes ", a.begin + at, " of the file");
    if (!std::equal(x.begin(), x.begin() + n, y.begin())) return false;
  }
  return true;
}

// nanoGPT's config ties the head when lm_head.weight holds transformer.wte.weight's bytes (import_config): a header
// cannot tell, so the two are compared in the file first.
bool untied_nanogpt_head(const std::string& path, const SafetensorsHeader& h) {
  const TensorInfo *head = nullptr, *wte = nullptr;
  for (const TensorInfo& t : h.tensors) {
    if (io::ends_with(t.name, "lm_head.weight")) head = &t;
    if (io::ends_with(t.name, "transformer.wte.weight")) wte = &t;
  }
  return head && wte && !same_bytes(path, *head, *wte);
}

// What import_file does, then the model built and loaded from its weights.
std::unique_ptr<Model> whole(const std::string& path, const ImportOptions& o, ImportedWeights* about) {
  ImportedWeights r = import_file(path, o);
  int heads = 0;
  std::unique_ptr<Model> m = build(r.kind, r.config_json, heads);
  m->load_weights(r.weights);
  if (about) {
    r.weights = {};
    *about = std::move(r);
  }
  return m;
}

}  // namespace

std::unique_ptr<Model> import_model(const std::string& path, const ImportOptions& o, ImportedWeights* about) {
  // The header alone first (errors name the path): the format, the model and its config come from it.
  SafetensorsHeader header;
  read_safetensors_stream(path, [&](SafetensorsReader& reader) { header = reader.header(); });
  std::string format, kind, config;
  io::with_path(path, [&] { config = io::import_config(io::skeleton(header), o, format, kind); });
  if (format == "nanogpt" && untied_nanogpt_head(path, header)) return whole(path, o, about);
  int heads = 0;
  std::unique_ptr<Model> m = io::with_path(path, [&] { return build(kind, config, heads); });
  std::vector<io::Target> targets;
  std::map<std::string, std::span<float>> values;
  for (const ParameterView& p : m->parameters()) {
    targets.push_back({p.name, {p.shape.begin(), p.shape.end()}});
    values[p.name] = p.value;
  }
  io::WeightPlan plan = io::with_path(path, [&] { return io::plan_header(header, format, kind, targets, heads); });
  if (!io::can_stream(plan)) return whole(path, o, about);
  std::unique_ptr<io::ImportSink> sink;
  read_safetensors_stream(path, [&](SafetensorsReader& reader) {
    sink = std::make_unique<io::ImportSink>(std::move(plan), reader.header(), values);
    reader.set_sink(sink.get());
  });
  std::vector<std::string> notes = io::with_path(path, [&] { return sink->finish(); });
  if (about) {
    about->format = format;
    about->kind = kind;
    about->config_json = config;
    about->notes = std::move(notes);
    about->weights = {};
  }
  return m;
}

}  // namespace qkv
