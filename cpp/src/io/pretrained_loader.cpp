// A GPT-2 model.safetensors streamed into a LanguageModel (qkv/pretrained_loader.h): an ImportSink writes each
// tensor into its parameter as its bytes arrive (io/import_sink.h), PretrainedLoader feeds it from chunks.
#include "qkv/pretrained_loader.h"

#include <map>
#include <set>
#include <utility>

#include "io/checkpoint.h"
#include "io/model_access.h"
#include "io/pretrained.h"
#include "io/push_through.h"
#include "nn/parameters.h"
#include "qkv/config.h"
#include "qkv/error.h"

namespace qkv {
namespace io {

Gpt2Layout gpt2_layout(const std::string& config) {
  Gpt2Layout l;
  const nn::Parameters::ForLoading shapes_only{nn::Parameters::ShapesOnly{}};
  LanguageModel m(language_model_config_from_json(config));
  l.heads = m.config().heads;
  for (const nn::Param& p : ModelAccess::core(m).params.all()) {
    l.targets.push_back({p.name, p.shape});
    // Model::quantize's set: the matrices, and the token embedding when it is the (tied) head.
    if (p.matrix || (p.embedding && m.config().tie_head)) l.packable.insert(p.name);
  }
  return l;
}

nn::Formats kept_formats(const WeightPlan& plan, const SafetensorsHeader& header, const Gpt2Layout& layout) {
  const auto dtype = [&](const std::string& name) -> std::string {
    for (const TensorInfo& t : header.tensors)
      if (t.name == name) return t.dtype;
    return "";
  };
  nn::Formats out;
  for (const ParamPlan& p : plan.params) {
    if (!layout.packable.count(p.name) || p.parts.size() != 1 || (p.op != Op::Copy && p.op != Op::Transpose)) continue;
    const std::string d = dtype(p.parts[0]);
    // A tied head read into (or compared with) the embedding's storage must be of the same dtype.
    if (p.parts[0] == plan.tied_to && dtype(plan.tied_head) != d) continue;
    if (d == "F16") out[p.name] = ops::WeightFormat::F16;
    if (d == "BF16") out[p.name] = ops::WeightFormat::BF16;
  }
  return out;
}

Gpt2Target gpt2_target(const Gpt2Layout& layout, const std::string& config, const OptimizerConfig& optimizer,
                       const SafetensorsHeader& header, const std::vector<std::string>* order,
                       PretrainedWeights weights) {
  WeightPlan plan = plan_header(header, "gpt2", "language_model", layout.targets, layout.heads);
  const nn::Formats formats = weights == PretrainedWeights::Keep ? kept_formats(plan, header, layout) : nn::Formats{};
  Gpt2Target r;
  {
    // Built as a loader builds it: no initial values to overwrite, gradients and moments made when it first trains;
    // the kept matrices laid out packed at once, so their float32 values never exist.
    const nn::Parameters::ForLoading loading(&formats);
    r.model = std::make_unique<LanguageModel>(language_model_config_from_json(config), optimizer, Device::CPU);
  }
  std::map<std::string, std::span<float>> values;
  ImportSink::Packed packed;
  for (nn::Param& p : ModelAccess::core(*r.model).params.all()) {
    if (p.is_packed())
      packed[p.name] = {p.format, p.packed, p.rows(), p.cols()};
    else
      values[p.name] = p.value;
  }
  if (order)
    r.sink = std::make_unique<ImportSink>(std::move(plan), *order, values, packed);
  else
    r.sink = std::make_unique<ImportSink>(std::move(plan), header, values, packed);
  return r;
}

}  // namespace io

// A shard of sharded weights: its file, the tensors the index puts in it, and its header as planned.
struct Shard {
  std::string file;
  std::set<std::string> names;
  SafetensorsHeader header;
};

struct PretrainedLoader::State {
  explicit State(std::optional<uint64_t> total) : reader(std::in_place, total), total(total) {}
  std::optional<SafetensorsReader> reader;  // of the file (sharded: of the shard) the next bytes belong to
  std::optional<uint64_t> total;
  std::string config;
  std::vector<std::string> config_notes, notes;
  io::Gpt2Layout layout;  // the model's parameters, known from config.json before the model is built
  OptimizerConfig optimizer;
  PretrainedWeights weights = PretrainedWeights::F32;
  std::unique_ptr<LanguageModel> model;  // built once the header(s) are planned (io::gpt2_target)
  std::unique_ptr<io::ImportSink> sink;
  uint64_t received = 0;
  std::span<uint8_t> last;    // what buffer() gave
  std::vector<Shard> shards;  // empty for one model.safetensors
  size_t shard = 0;           // the shard `reader` reads

  // config.json read and the model's parameters listed (a config the model refuses is refused here); its memory is
  // allocated only once the header says the formats (target()).
  void build(std::string_view config_json, const OptimizerConfig& o, PretrainedWeights w) {
    config = io::gpt2_config(config_json, config_notes);
    layout = io::gpt2_layout(config);
    optimizer = o;
    weights = w;
  }
  void target(const SafetensorsHeader& header, const std::vector<std::string>* order) {
    io::Gpt2Target t = io::gpt2_target(layout, config, optimizer, header, order, weights);
    model = std::move(t.model);
    sink = std::move(t.sink);
  }
  // Errors of the bytes of shard `shard` name its file.
  template <class F>
  void in_shard(F&& fn) {
    if (shards.empty()) return fn();
    io::with_path(shards[std::min(shard, shards.size() - 1)].file, fn);
  }
};

namespace {

bool same_tensors(const SafetensorsHeader& a, const SafetensorsHeader& b) {
  if (a.tensors.size() != b.tensors.size() || a.file_size != b.file_size) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorInfo &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin || x.end != y.end)
      return false;
  }
  return true;
}

}  // namespace

PretrainedLoader::PretrainedLoader(std::string_view config_json, std::optional<uint64_t> total,
                                   const OptimizerConfig& optimizer, PretrainedWeights weights)
    : s_(std::make_unique<State>(total)) {
  s_->build(config_json, optimizer, weights);
}

PretrainedLoader::PretrainedLoader(std::string_view config_json, std::string_view index_json,
                                   std::vector<PretrainedShard> shards, const OptimizerConfig& optimizer,
                                   PretrainedWeights weights)
    : s_(std::make_unique<State>(std::nullopt)) {
  State& s = *s_;
  s.build(config_json, optimizer, weights);
  const std::string index = "model.safetensors.index.json";
  std::map<std::string, std::set<std::string>> wanted = io::shard_map(index_json, index);
  check(!wanted.empty(), index, ": its weight_map names no tensor");
  // Every shard the index names, given once: the plan needs every header before the first tensor's bytes.
  std::vector<std::string> problems;
  std::set<std::string> given;
  for (const PretrainedShard& f : shards) {
    check(given.insert(f.file).second, "the shard ", f.file, " is given twice");
    check(wanted.count(f.file), "the shard ", f.file, " is not one ", index, " names");
  }
  for (const auto& w : wanted)
    if (!given.count(w.first)) problems.push_back(detail::cat("the shard ", w.first, " is not given"));
  io::check_shards(index, problems);
  // The shards' headers joined, their tensors in the order they will stream.
  SafetensorsHeader all;
  std::vector<std::string> order;
  uint64_t bytes = 0;
  for (PretrainedShard& f : shards) {
    Shard shard{f.file, std::move(wanted[f.file]), {}};
    shard.header = io::with_path(f.file, [&] { return parse_safetensors_header(f.head, std::nullopt); });
    std::set<std::string> left = shard.names;
    for (const TensorInfo& t : shard.header.tensors)
      if (left.erase(t.name)) all.tensors.push_back(t), order.push_back(t.name);
    for (const auto& n : left) problems.push_back(detail::cat("tensor \"", n, "\" is not in ", f.file));
    bytes += shard.header.file_size;
    s.shards.push_back(std::move(shard));
  }
  io::check_shards(index, problems);
  s.target(all, &order);
  s.total = bytes;
  // Each shard's reader knows no size: its header, compared with the one planned, gives where it ends.
  s.reader.emplace(std::nullopt);
}

PretrainedLoader::~PretrainedLoader() = default;

std::span<uint8_t> PretrainedLoader::buffer() {
  State& s = *s_;
  if (!s.reader) return s.last = {};  // every shard is complete
  return s.last = s.reader->buffer();
}

void PretrainedLoader::commit(size_t n) {
  State& s = *s_;
  check(n <= s.last.size(), "PretrainedLoader::commit(", n, "): more bytes than buffer() gave (", s.last.size(), ")");
  if (!s.reader) return;  // every shard is complete (n is 0: buffer() gave nothing)
  s.in_shard([&] {
    const bool in_header = !s.reader->has_header();
    s.reader->commit(n);
    s.received += n;
    s.last = {};
    if (!in_header || !s.reader->has_header()) return;
    if (s.shards.empty()) {
      s.target(s.reader->header(), nullptr);
    } else {
      // The plan was made from the header given first: the one that streams must be the same.
      const Shard& shard = s.shards[s.shard];
      check(same_tensors(s.reader->header(), shard.header),
            "its header is not the one given before its bytes (did the file change?)");
      s.sink->bind(s.reader->header(), &shard.names);
    }
    s.reader->set_sink(s.sink.get());
  });
  // A complete shard: the next bytes start the next one's file.
  while (!s.shards.empty() && s.reader && s.reader->done()) {
    if (++s.shard == s.shards.size()) {
      s.reader.reset();
      break;
    }
    s.reader.emplace(std::nullopt);
  }
}

void PretrainedLoader::push(std::span<const uint8_t> bytes) { io::push_through(*this, bytes); }

uint64_t PretrainedLoader::received() const { return s_->received; }

std::optional<uint64_t> PretrainedLoader::total() const {
  if (s_->shards.empty() && s_->reader->has_header()) return s_->reader->header().file_size;
  return s_->total;
}

std::unique_ptr<LanguageModel> PretrainedLoader::finish() {
  State& s = *s_;
  // One file: its reader says whether it is complete. Shards: a reader is left only while a shard is incomplete (a
  // complete one gives way to the next, the last to none), and its finish() refuses naming that shard.
  if (s.reader) s.in_shard([&] { s.reader->finish(); });
  check(s.sink != nullptr, "safetensors: the file ended after its header (truncated?)");
  s.notes = s.sink->finish();
  s.notes.insert(s.notes.end(), s.config_notes.begin(), s.config_notes.end());
  return std::move(s.model);
}

const std::string& PretrainedLoader::config_json() const { return s_->config; }
const std::vector<std::string>& PretrainedLoader::notes() const { return s_->notes; }

}  // namespace qkv
