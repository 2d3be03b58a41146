// A GPT-2 model.safetensors streamed into a LanguageModel (qkv/pretrained_loader.h): an ImportSink writes each
// tensor into its parameter as its bytes arrive (io/import_sink.h), PretrainedLoader feeds it from chunks.
#include "qkv/pretrained_loader.h"

#include <map>

#include "io/pretrained.h"
#include "io/push_through.h"
#include "nn/parameters.h"
#include "qkv/config.h"
#include "qkv/error.h"

namespace qkv {
namespace io {

std::unique_ptr<ImportSink> gpt2_sink(LanguageModel& model, const SafetensorsHeader& header,
                                      const std::vector<std::string>* order) {
  std::vector<Target> targets;
  std::map<std::string, std::span<float>> values;
  for (const ParameterView& p : model.parameters()) {
    targets.push_back({p.name, {p.shape.begin(), p.shape.end()}});
    values[p.name] = p.value;
  }
  WeightPlan plan = plan_header(header, "gpt2", "language_model", targets, model.config().heads);
  if (order) return std::make_unique<ImportSink>(std::move(plan), *order, values);
  return std::make_unique<ImportSink>(std::move(plan), header, values);
}

}  // namespace io

struct PretrainedLoader::State {
  explicit State(std::optional<uint64_t> total) : reader(total), total(total) {}
  SafetensorsReader reader;
  std::optional<uint64_t> total;
  std::string config;
  std::vector<std::string> config_notes, notes;
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<io::ImportSink> sink;
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
    s.sink = io::gpt2_sink(*s.model, s.reader.header());
    s.reader.set_sink(s.sink.get());
  }
}

void PretrainedLoader::push(std::span<const uint8_t> bytes) { io::push_through(*this, bytes); }

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
