// CheckpointLoader (qkv/checkpoint_loader.h): SafetensorsReader + CheckpointSink (io/checkpoint.h) around a
// model built from the header.
#include "qkv/checkpoint_loader.h"

#include <vector>

#include "io/checkpoint.h"
#include "io/push_through.h"
#include "nn/parameters.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"

namespace qkv {
namespace {

template <class M>
struct Kind;
template <>
struct Kind<LanguageModel> {
  static constexpr const char* name = "language_model";
  static LanguageModelConfig config(const std::string& json) { return language_model_config_from_json(json); }
};
template <>
struct Kind<Seq2Seq> {
  static constexpr const char* name = "seq2seq";
  static Seq2SeqConfig config(const std::string& json) { return seq2seq_config_from_json(json); }
};
template <>
struct Kind<Classifier> {
  static constexpr const char* name = "classifier";
  static ClassifierConfig config(const std::string& json) { return classifier_config_from_json(json); }
};

}  // namespace

template <class M>
struct CheckpointLoader<M>::State {
  explicit State(std::optional<uint64_t> total) : reader(total), total(total) {}
  SafetensorsReader reader;
  std::optional<uint64_t> total;
  std::vector<uint8_t> head;  // the header's bytes as they came: a foreign state dict needs them again
  io::Checkpoint checkpoint;
  std::unique_ptr<M> model;
  std::unique_ptr<io::CheckpointSink> sink;
  bool foreign = false;
  std::vector<uint8_t> whole;  // a foreign state dict's bytes, header included
  uint64_t received = 0;
  std::span<uint8_t> last;  // what buffer() gave
};

template <class M>
CheckpointLoader<M>::CheckpointLoader(std::optional<uint64_t> total) : s_(std::make_unique<State>(total)) {}
template <class M>
CheckpointLoader<M>::~CheckpointLoader() = default;

template <class M>
std::span<uint8_t> CheckpointLoader<M>::buffer() {
  State& s = *s_;
  if (s.foreign) {
    // As much room as the rest of a known size, else grown by half (amortised, as a vector would).
    const size_t want =
        s.total ? static_cast<size_t>(*s.total - s.received) : std::max<size_t>(1 << 20, s.whole.size() / 2);
    if (want == 0) return s.last = {};
    s.whole.resize(static_cast<size_t>(s.received) + want);
    return s.last = std::span<uint8_t>(s.whole).subspan(static_cast<size_t>(s.received));
  }
  return s.last = s.reader.buffer();
}

template <class M>
void CheckpointLoader<M>::commit(size_t n) {
  State& s = *s_;
  check(n <= s.last.size(), "CheckpointLoader::commit(", n, "): more bytes than buffer() gave (", s.last.size(), ")");
  if (s.foreign) {
    s.received += n;
    s.last = {};
    return;
  }
  const bool in_header = !s.reader.has_header();
  if (in_header) s.head.insert(s.head.end(), s.last.begin(), s.last.begin() + static_cast<std::ptrdiff_t>(n));
  s.reader.commit(n);
  s.received += n;
  s.last = {};
  if (!in_header || !s.reader.has_header()) return;
  const SafetensorsHeader& header = s.reader.header();
  if (!s.total) s.total = header.file_size;
  if (!io::checkpoint_from_header(header, Kind<M>::name, s.checkpoint)) {
    s.foreign = true;  // mapped as a whole by M::load at finish()
    s.whole = std::move(s.head);
    return;
  }
  s.head = {};
  {
    const nn::Parameters::ForLoading loading(&s.checkpoint.formats);
    s.model = std::make_unique<M>(Kind<M>::config(s.checkpoint.config_json), s.checkpoint.optimizer);
  }
  s.sink = std::make_unique<io::CheckpointSink>(static_cast<Model&>(*s.model).core(), s.checkpoint, header);
  s.reader.set_sink(s.sink.get());
}

template <class M>
void CheckpointLoader<M>::push(std::span<const uint8_t> bytes) {
  io::push_through(*this, bytes);
}

template <class M>
uint64_t CheckpointLoader<M>::received() const {
  return s_->received;
}

template <class M>
std::optional<uint64_t> CheckpointLoader<M>::total() const {
  return s_->total;
}

template <class M>
std::unique_ptr<M> CheckpointLoader<M>::finish() {
  State& s = *s_;
  if (s.foreign) {
    s.whole.resize(static_cast<size_t>(s.received));
    return M::load(s.whole);
  }
  s.reader.finish();
  check(s.model != nullptr, "safetensors: the file ended after its header (truncated?)");
  s.sink->finish();
  return std::move(s.model);
}

template class CheckpointLoader<LanguageModel>;
template class CheckpointLoader<Seq2Seq>;
template class CheckpointLoader<Classifier>;

}  // namespace qkv
