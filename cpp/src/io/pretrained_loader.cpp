// A GPT-2 model.safetensors streamed into a LanguageModel (qkv/pretrained_loader.h): Gpt2Sink writes each tensor
// into its parameter as its bytes arrive (io/pretrained.h), PretrainedLoader feeds it from chunks.
#include "qkv/pretrained_loader.h"

#include <cstring>
#include <map>

#include "io/import_buffers.h"
#include "io/pretrained.h"
#include "nn/parameters.h"
#include "qkv/config.h"
#include "qkv/error.h"

namespace qkv {
namespace io {
namespace {

// The header's tensors without their bytes: what plan_weights reads.
SafetensorsFile skeleton(const SafetensorsHeader& h) {
  SafetensorsFile f;
  f.metadata = h.metadata;
  for (const TensorInfo& t : h.tensors) f.tensors.push_back({t.name, t.dtype, t.shape, {}});
  return f;
}

std::vector<Target> targets_of(LanguageModel& m) {
  std::vector<Target> t;
  for (const ParameterView& p : m.parameters()) t.push_back({p.name, {p.shape.begin(), p.shape.end()}});
  return t;
}

}  // namespace

Gpt2Sink::Gpt2Sink(LanguageModel& model, const SafetensorsHeader& header) : header_(header) {
  plan_ = plan_weights(skeleton(header), "gpt2", "language_model", targets_of(model), model.config().heads);
  std::map<std::string, size_t> index;  // file name -> position in the header
  for (size_t i = 0; i < header.tensors.size(); ++i) index[header.tensors[i].name] = i;
  // A tied head of another shape than the embedding cannot be compared value by value: refused with the header.
  std::string wte;
  for (const ParamPlan& p : plan_.params)
    if (p.name == "tok_emb.weight" && !p.parts.empty()) wte = p.parts[0];
  for (const std::string& c : plan_.checks)
    if (c == "lm_head.weight" && !wte.empty()) {
      head_ = c, wte_ = wte;
      if (header.tensors[index.at(c)].shape != header.tensors[index.at(wte)].shape)
        plan_.wrong.push_back(gpt2_untied_head(head_, wte_));
    }
  const std::string problems = plan_.problems();
  if (!problems.empty()) throw Error(problems);

  actions_.assign(header.tensors.size(), {});
  collected_.resize(header.tensors.size());
  std::map<std::string, std::span<float>> values;
  for (const ParameterView& p : model.parameters()) values[p.name] = p.value;
  for (const ParamPlan& p : plan_.params) {
    const std::span<float> v = values.at(p.name);
    switch (p.op) {
      case Op::Copy:
      case Op::CopyOrZeros: actions_[index.at(p.parts[0])] = {Act::Write, v.data()}; break;
      case Op::Transpose: actions_[index.at(p.parts[0])] = {Act::Transpose, v.data(), p.shape[1], p.shape[0]}; break;
      case Op::Stack3:  // W_q | W_k | W_v, each a third of the rows
        for (size_t k = 0; k < p.parts.size(); ++k)
          actions_[index.at(p.parts[k])] = {Act::Write, v.data() + k * v.size() / 3};
        break;
      case Op::Zeros: std::fill(v.begin(), v.end(), 0.f); break;
      case Op::Expand3: throw Error("import: gpt2 has no per-head projections to expand");  // no rule makes one
    }
  }
  for (const std::string& c : plan_.checks) actions_[index.at(c)].act = Act::Collect;
  if (!head_.empty()) {
    // Whichever of the tied pair comes first in the file writes the embedding; the other is compared with it.
    const size_t h = index.at(head_), w = index.at(wte_);
    float* dst = actions_[w].dst;
    actions_[std::min(h, w)] = {Act::Write, dst};
    actions_[std::max(h, w)] = {Act::Compare, dst};
  }
}

std::span<uint8_t> Gpt2Sink::place(size_t i) {
  const TensorInfo& t = header_.tensors[i];
  if (actions_[i].act != Act::Write || t.dtype != "F32") return {};
  return {reinterpret_cast<uint8_t*>(actions_[i].dst), static_cast<size_t>(t.size())};
}

void Gpt2Sink::take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) {
  const Action& a = actions_[i];
  const TensorInfo& t = header_.tensors[i];
  if (a.act == Act::Skip) return;
  if (a.act == Act::Collect) {
    collected_[i].bytes.insert(collected_[i].bytes.end(), bytes.begin(), bytes.end());
    return;
  }
  // Read into place (place()): any number of bytes, already where they belong.
  if (a.act == Act::Write && reinterpret_cast<const uint8_t*>(a.dst) + offset == bytes.data()) return;
  // Else whole elements (the reader's staging guarantees it): element `first` of the tensor onwards.
  const size_t element = dtype_size(t.dtype), first = static_cast<size_t>(offset / element);
  const size_t n = bytes.size() / element;
  if (a.act == Act::Write) {
    to_floats(t.dtype, bytes, std::span<float>(a.dst + first, n));
    return;
  }
  floats_.resize(n);
  to_floats(t.dtype, bytes, floats_);
  if (a.act == Act::Compare) {
    // Float equality, as check_values compares the two tensors (a NaN differs from itself there too).
    for (size_t k = 0; k < n && !head_differs_; ++k) head_differs_ = !(floats_[k] == a.dst[first + k]);
    return;
  }
  // Transpose: stored w (rows = in, cols = out), element (r, c) -> the parameter's (c, r), rows columns wide.
  int64_t r = static_cast<int64_t>(first) / a.cols, c = static_cast<int64_t>(first) % a.cols;
  for (size_t k = 0; k < n; ++k) {
    a.dst[c * a.rows + r] = floats_[k];
    if (++c == a.cols) c = 0, ++r;
  }
}

void Gpt2Sink::end(size_t i) {
  if (actions_[i].act != Act::Collect) return;
  const TensorInfo& t = header_.tensors[i];
  SafetensorsFile one;
  one.tensors.push_back({t.name, t.dtype, t.shape, std::move(collected_[i].bytes)});
  check_values(one, plan_);
  collected_[i] = {};
}

std::vector<std::string> Gpt2Sink::finish() {
  if (!head_.empty()) {
    if (head_differs_)
      plan_.wrong.push_back(gpt2_untied_head(head_, wte_));
    else
      plan_.notes.push_back(gpt2_tied_head_note(head_, wte_));
  }
  gpt2_buffer_notes(plan_.buffers, plan_.notes);
  const std::string problems = plan_.problems();
  if (!problems.empty()) throw Error(problems);
  return plan_.notes;
}

}  // namespace io

struct PretrainedLoader::State {
  explicit State(std::optional<uint64_t> total) : reader(total), total(total) {}
  SafetensorsReader reader;
  std::optional<uint64_t> total;
  std::string config;
  std::vector<std::string> config_notes, notes;
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<io::Gpt2Sink> sink;
  uint64_t received = 0;
  std::span<uint8_t> last;  // what buffer() gave
};

PretrainedLoader::PretrainedLoader(std::string_view config_json, std::optional<uint64_t> total,
                                   const OptimizerConfig& optimizer)
    : s_(std::make_unique<State>(total)) {
  s_->config = io::gpt2_config(config_json, s_->config_notes);
  // Built as a loader builds it: no initial values to overwrite, gradients and moments made when it first trains.
  const nn::Parameters::ForLoading loading;
  s_->model = std::make_unique<LanguageModel>(language_model_config_from_json(s_->config), optimizer, Device::CPU);
}

PretrainedLoader::~PretrainedLoader() = default;

std::span<uint8_t> PretrainedLoader::buffer() { return s_->last = s_->reader.buffer(); }

void PretrainedLoader::commit(size_t n) {
  State& s = *s_;
  check(n <= s.last.size(), "PretrainedLoader::commit(", n, "): more bytes than buffer() gave (", s.last.size(), ")");
  const bool in_header = !s.reader.has_header();
  s.reader.commit(n);
  s.received += n;
  s.last = {};
  if (in_header && s.reader.has_header()) {
    s.sink = std::make_unique<io::Gpt2Sink>(*s.model, s.reader.header());
    s.reader.set_sink(s.sink.get());
  }
}

void PretrainedLoader::push(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const std::span<uint8_t> to = buffer();
    check(!to.empty(), "safetensors: the file ends at byte ", total().value_or(received()), " but ", bytes.size(),
          " more bytes follow, expected no bytes after the last tensor");
    const size_t n = std::min(to.size(), bytes.size());
    std::memcpy(to.data(), bytes.data(), n);
    commit(n);
    bytes = bytes.subspan(n);
  }
}

uint64_t PretrainedLoader::received() const { return s_->received; }

std::optional<uint64_t> PretrainedLoader::total() const {
  if (s_->reader.has_header()) return s_->reader.header().file_size;
  return s_->total;
}

std::unique_ptr<LanguageModel> PretrainedLoader::finish() {
  State& s = *s_;
  s.reader.finish();
  check(s.sink != nullptr, "safetensors: the file ended after its header (truncated?)");
  s.notes = s.sink->finish();
  s.notes.insert(s.notes.end(), s.config_notes.begin(), s.config_notes.end());
  return std::move(s.model);
}

const std::string& PretrainedLoader::config_json() const { return s_->config; }
const std::vector<std::string>& PretrainedLoader::notes() const { return s_->notes; }

}  // namespace qkv
