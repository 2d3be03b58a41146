// The qkv tool's tasks (task.h): data files -> tokenizers -> batches for each model, the presets, and
// checkpoints that carry their tokenizers in the metadata.
//
// Data formats: lm reads plain UTF-8 text (a char tokenizer of its distinct characters plus <unk>);
// seq2seq reads TSV lines source<TAB>target and classifier TSV lines label<TAB>text (char tokenizers with
// <pad> = 0, <bos>, <eos>, <unk>). Blank lines are skipped; a line without exactly one tab, or with an
// empty field, is an error naming file:line.
#include "task.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "qkv/tokenizer.h"
#include "runtime/random.h"
#include "tsv.h"

namespace qkv::cli {

using nlohmann::json;

namespace {

// Runs fn; a qkv::Error it throws gets `prefix: ` in front of its message.
template <class F>
auto prefixed(const std::string& prefix, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(prefix + ": " + e.what());
  }
}

// The random stream of a training step: a function of (seed, step) alone.
Rng batch_rng(uint64_t seed, int step) {
  Rng mix(seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(step)));
  return Rng(mix.next_u64());
}

// Metrics of several batches, weighted by their counts.
struct MetricSum {
  double loss = 0.0, correct = 0.0;
  long long count = 0;
  void add(const Metrics& m) {
    loss += m.loss * static_cast<double>(m.count);
    correct += m.accuracy * static_cast<double>(m.count);
    count += m.count;
  }
  Metrics result() const {
    Metrics m;
    m.count = count;
    if (count == 0) return m;
    m.loss = loss / static_cast<double>(count);
    m.accuracy = correct / static_cast<double>(count);
    m.perplexity = std::exp(m.loss);
    return m;
  }
};

// The held-out split of n examples: the last 10%, at least one when there are two or more.
int held_out_count(int n) { return n >= 2 ? std::max(1, n / 10) : 0; }

std::vector<int32_t> encode(const Tokenizer& tok, const std::string& text, const std::string& where, bool bos,
                            bool eos) {
  return prefixed(where, [&] { return tok.encode(text, bos, eos); });
}

SpecialTokens all_specials() { return {}; }
SpecialTokens unk_only() { return {false, false, false, true}; }

std::string concat(const std::vector<Row>& rows, bool first) {
  std::string all;
  for (const Row& r : rows) all += first ? r.first : r.second;
  return all;
}

// --- the three tasks ---------------------------------------------------------------------------------

class LmTask final : public Task {
 public:
  // eos: ids that end generation unprinted (a pretrained folder's end-of-text), none for qkv's own checkpoints.
  LmTask(Tokenizer tok, std::unique_ptr<LanguageModel> model, std::vector<int32_t> eos = {})
      : tok_(std::move(tok)), model_(std::move(model)), eos_(std::move(eos)) {}

  Kind kind() const override { return Kind::LM; }

  void set_data(const std::string& path, const std::string& text) override {
    check_text(path, text, "plain text");
    path_ = path;
    ids_ = encode(tok_, text, path, false, false);
    split_ = ids_.size() - ids_.size() / 10;
  }

  void check_trainable() const override {
    const size_t T = static_cast<size_t>(model_->config().context);
    check(split_ >= T + 1, path_, ": the training split (the first 90% of the text) has ", split_,
          " tokens: expected at least context + 1 = ", T + 1,
          " (use a longer text, or a smaller \"context\" in --config)");
  }

  // Random windows of the training split: inputs ids[o, o+T), targets ids[o+1, o+T+1).
  Batch train_batch(uint64_t seed, int step, int B) const override {
    const int T = model_->config().context;
    Rng rng = batch_rng(seed, step);
    Batch b;
    b.rows = B;
    b.len_a = T;
    b.tokens = static_cast<long long>(B) * T;
    for (int i = 0; i < B; ++i) {
      const auto o = static_cast<std::ptrdiff_t>(rng.next_u64() % (split_ - static_cast<size_t>(T)));
      b.a.insert(b.a.end(), ids_.begin() + o, ids_.begin() + o + T);
      b.b.insert(b.b.end(), ids_.begin() + o + 1, ids_.begin() + o + 1 + T);
    }
    return b;
  }

  float train_step(const Batch& b) override { return model_->train_step(b.a, b.b, b.rows, b.len_a); }
  StepLoss queue_train_step(const Batch& b) override { return model_->queue_train_step(b.a, b.b, b.rows, b.len_a); }
  long long counted(const Batch& b) const override { return static_cast<long long>(b.rows) * b.len_a; }
  float train_part(const Batch& b, float weight) override {
    model_->zero_grad();
    const float loss = model_->accumulate(b.a, b.b, b.rows, b.len_a, weight);
    model_->apply_gradients();
    return loss;
  }

  // Consecutive non-overlapping windows of the split.
  Metrics evaluate(bool held_out, int B, int max_batches) override {
    const auto first = ids_.begin() + static_cast<std::ptrdiff_t>(held_out ? split_ : 0);
    const auto n = static_cast<size_t>(ids_.end() - first);
    MetricSum sum;
    if (n < 2) return sum.result();
    const int T = static_cast<int>(std::min<size_t>(static_cast<size_t>(model_->config().context), n - 1));
    const int windows = static_cast<int>((n - 1) / static_cast<size_t>(T));
    std::vector<int32_t> x, y;
    for (int w = 0, batches = 0; w < windows && (max_batches == 0 || batches < max_batches); w += B, ++batches) {
      const int rows = std::min(B, windows - w);
      x.clear();
      y.clear();
      for (int r = 0; r < rows; ++r) {
        const auto o = first + static_cast<std::ptrdiff_t>(w + r) * T;
        x.insert(x.end(), o, o + T);
        y.insert(y.end(), o + 1, o + 1 + T);
      }
      sum.add(model_->evaluate(x, y, rows, T));
    }
    return sum.result();
  }

  void generate(const std::string& prompt, const SamplingOptions& options, const std::string& stop_chars, int beam,
                float, const std::function<bool(const std::string&)>& on_text) override {
    if (beam != 1)
      throw UsageError("--beam " + std::to_string(beam) +
                       ": beam search is for seq2seq checkpoints; an lm samples (--temperature, --top-k, --top-p)");
    if (prompt.empty()) throw UsageError("--prompt is empty: expected the text to continue");
    const std::vector<int32_t> ids = encode(tok_, prompt, "--prompt", false, false);
    SamplingOptions o = options;
    for (int32_t id : encode(tok_, stop_chars, "--stop", false, false)) {
      if (id == tok_.unk_id())
        throw UsageError("--stop \"" + stop_chars + "\": a character is not in the checkpoint's vocabulary");
      o.stop_tokens.push_back(id);
    }
    // A BPE token can end inside a character (GPT-2 spells many emoji in two tokens), which alone decodes to
    // U+FFFD: such tokens are held back until the character is whole (4 tokens at most, the longest UTF-8).
    std::vector<int32_t> pending;
    const bool bpe = tok_.kind() == "bpe";
    model_->generate(ids, o, [&](int32_t t) {
      if (std::find(eos_.begin(), eos_.end(), t) != eos_.end()) return false;  // the end of the text: not printed
      pending.push_back(t);
      const std::string s = tok_.decode(pending);
      if (bpe && pending.size() < 4 && s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0) return true;
      pending.clear();
      return on_text(s);
    });
    if (!pending.empty()) on_text(tok_.decode(pending));
  }

  Model& model() const override { return *model_; }
  std::string config_json() const override { return to_json(model_->config()); }
  std::string optimizer_json() const override { return to_json(model_->optimizer()); }

 protected:
  std::map<std::string, std::string> metadata() const override { return {{"qkv.tokenizer", tok_.to_json()}}; }

 private:
  Tokenizer tok_;
  std::unique_ptr<LanguageModel> model_;
  std::vector<int32_t> eos_;
  std::string path_;
  std::vector<int32_t> ids_;
  size_t split_ = 0;  // ids_[0, split_) train, the rest is held out
};

// Rows of fixed length: the examples padded with pad id 0 to the longest in the file.
struct Padded {
  std::vector<int32_t> ids;
  int len = 0;
  void assign(const std::vector<std::vector<int32_t>>& rows) {
    len = 0;
    for (const auto& r : rows) len = std::max(len, static_cast<int>(r.size()));
    ids.assign(rows.size() * static_cast<size_t>(len), 0);
    for (size_t i = 0; i < rows.size(); ++i) std::copy(rows[i].begin(), rows[i].end(), ids.begin() + i * len);
  }
  const int32_t* row(int i) const { return ids.data() + static_cast<size_t>(i) * len; }
};

// The examples of TSV tasks are rows: training batches draw rows at random from the first 90%.
class RowTask : public Task {
 public:
  void check_trainable() const override { check(n_ - held_out_count(n_) >= 1, path_, ": no training examples"); }

 protected:
  // Row indices of a batch: B draws from the training rows.
  std::vector<int> draw(uint64_t seed, int step, int B) const {
    Rng rng = batch_rng(seed, step);
    const auto n_train = static_cast<uint64_t>(n_ - held_out_count(n_));
    std::vector<int> rows(static_cast<size_t>(B));
    for (int& r : rows) r = static_cast<int>(rng.next_u64() % n_train);
    return rows;
  }
  // Calls fn(first_row, rows) for consecutive batches of the held-out split or of everything.
  template <class F>
  Metrics each_batch(bool held_out, int B, int max_batches, F&& fn) const {
    MetricSum sum;
    const int begin = held_out ? n_ - held_out_count(n_) : 0;
    for (int i = begin, batches = 0; i < n_ && (max_batches == 0 || batches < max_batches); i += B, ++batches)
      sum.add(fn(i, std::min(B, n_ - i)));
    return sum.result();
  }

  std::string path_;
  int n_ = 0;
};

class Seq2SeqTask final : public RowTask {
 public:
  Seq2SeqTask(Tokenizer src, Tokenizer tgt, std::unique_ptr<Seq2Seq> model)
      : src_tok_(std::move(src)), tgt_tok_(std::move(tgt)), model_(std::move(model)) {}

  Kind kind() const override { return Kind::Seq2Seq; }

  // src = source + eos; tgt_in = bos + target; tgt_out = target + eos.
  void set_data(const std::string& path, const std::string& text) override {
    const auto rows = read_tsv(path, text, "source", "target");
    const int context = model_->config().context;
    std::vector<std::vector<int32_t>> src, tgt_in, tgt_out;
    for (const Row& r : rows) {
      const std::string where = detail::cat(path, ":", r.line);
      src.push_back(encode(src_tok_, r.first, where, false, true));
      tgt_out.push_back(encode(tgt_tok_, r.second, where, false, true));
      tgt_in.push_back(encode(tgt_tok_, r.second, where, true, false));
      check(static_cast<int>(src.back().size()) <= context, where, ": the source is ", src.back().size(),
            " tokens with <eos>: expected at most context = ", context, " (raise \"context\" in --config)");
      check(static_cast<int>(tgt_in.back().size()) <= context, where, ": the target is ", tgt_in.back().size(),
            " tokens with <bos>: expected at most context = ", context, " (raise \"context\" in --config)");
    }
    src_.assign(src);
    tgt_in_.assign(tgt_in);
    tgt_out_.assign(tgt_out);
    path_ = path;
    n_ = static_cast<int>(rows.size());
  }

  Batch train_batch(uint64_t seed, int step, int B) const override {
    Batch b;
    b.rows = B;
    b.len_a = src_.len;
    b.len_b = tgt_in_.len;
    for (int r : draw(seed, step, B)) {
      b.a.insert(b.a.end(), src_.row(r), src_.row(r) + src_.len);
      b.b.insert(b.b.end(), tgt_in_.row(r), tgt_in_.row(r) + tgt_in_.len);
      b.c.insert(b.c.end(), tgt_out_.row(r), tgt_out_.row(r) + tgt_out_.len);
    }
    b.tokens = static_cast<long long>(B) * (b.len_a + b.len_b);
    return b;
  }

  float train_step(const Batch& b) override { return model_->train_step(b.a, b.b, b.c, b.rows, b.len_a, b.len_b); }
  StepLoss queue_train_step(const Batch& b) override {
    return model_->queue_train_step(b.a, b.b, b.c, b.rows, b.len_a, b.len_b);
  }
  long long counted(const Batch& b) const override {
    return static_cast<long long>(std::count_if(b.c.begin(), b.c.end(), [&](int32_t t) { return t != pad_id(); }));
  }
  float train_part(const Batch& b, float weight) override {
    model_->zero_grad();
    const float loss = model_->accumulate(b.a, b.b, b.c, b.rows, b.len_a, b.len_b, weight);
    model_->apply_gradients();
    return loss;
  }
  int pad_id() const { return model_->config().pad_id; }

  Metrics evaluate(bool held_out, int B, int max_batches) override {
    return each_batch(held_out, B, max_batches, [&](int i, int rows) {
      const auto span = [&](const Padded& p) {
        return std::span<const int32_t>(p.row(i), static_cast<size_t>(rows) * p.len);
      };
      return model_->evaluate(span(src_), span(tgt_in_), span(tgt_out_), rows, src_.len, tgt_in_.len);
    });
  }

  // Greedy decoding or beam search (sampling is for lm checkpoints).
  void generate(const std::string& prompt, const SamplingOptions& options, const std::string&, int beam,
                float length_penalty, const std::function<bool(const std::string&)>& on_text) override {
    if (prompt.empty()) throw UsageError("--prompt is empty: expected a source text to translate");
    const std::vector<int32_t> src = encode(src_tok_, prompt, "--prompt", false, true);
    const int context = model_->config().context;
    if (static_cast<int>(src.size()) > context)
      throw UsageError(
          detail::cat("--prompt is ", src.size(), " tokens with <eos>: this checkpoint's context is ", context));
    const int max_len = std::min(options.max_new_tokens, context - 1);
    if (max_len < 1) return;
    DecodeOptions d;
    d.bos = tgt_tok_.bos_id();
    d.eos = tgt_tok_.eos_id();
    d.max_len = max_len;
    d.beam_width = beam;
    d.length_penalty = length_penalty;
    const auto out = model_->generate(src, 1, static_cast<int>(src.size()), d).tokens;
    for (int32_t t : out) {
      if (t == tgt_tok_.eos_id() || t == tgt_tok_.pad_id()) break;
      if (!on_text(tgt_tok_.decode(std::span<const int32_t>(&t, 1)))) break;
    }
  }

  Model& model() const override { return *model_; }
  std::string config_json() const override { return to_json(model_->config()); }
  std::string optimizer_json() const override { return to_json(model_->optimizer()); }

 protected:
  std::map<std::string, std::string> metadata() const override {
    return {{"qkv.tokenizer", src_tok_.to_json()}, {"qkv.tokenizer.target", tgt_tok_.to_json()}};
  }

 private:
  Tokenizer src_tok_, tgt_tok_;
  std::unique_ptr<Seq2Seq> model_;
  Padded src_, tgt_in_, tgt_out_;
};

class ClassifierTask final : public RowTask {
 public:
  ClassifierTask(Tokenizer tok, std::vector<std::string> labels, std::unique_ptr<Classifier> model)
      : tok_(std::move(tok)), labels_(std::move(labels)), model_(std::move(model)) {}

  Kind kind() const override { return Kind::Classifier; }

  // tokens = <bos> (the [CLS] token the head reads) + text.
  void set_data(const std::string& path, const std::string& text) override {
    const auto rows = read_tsv(path, text, "label", "text");
    const int context = model_->config().context;
    std::vector<std::vector<int32_t>> tokens;
    labels_of_rows_.clear();
    for (const Row& r : rows) {
      const std::string where = detail::cat(path, ":", r.line);
      const auto it = std::find(labels_.begin(), labels_.end(), r.first);
      if (it == labels_.end()) {
        std::string known;
        for (const auto& l : labels_) known += (known.empty() ? "" : ", ") + l;
        throw Error(detail::cat(where, ": label \"", r.first, "\" is not one of the model's classes: ", known));
      }
      labels_of_rows_.push_back(static_cast<int32_t>(it - labels_.begin()));
      tokens.push_back(encode(tok_, r.second, where, true, false));
      check(static_cast<int>(tokens.back().size()) <= context, where, ": the text is ", tokens.back().size(),
            " tokens with <bos>: expected at most context = ", context, " (raise \"context\" in --config)");
    }
    tokens_.assign(tokens);
    path_ = path;
    n_ = static_cast<int>(rows.size());
  }

  Batch train_batch(uint64_t seed, int step, int B) const override {
    Batch b;
    b.rows = B;
    b.len_a = tokens_.len;
    for (int r : draw(seed, step, B)) {
      b.a.insert(b.a.end(), tokens_.row(r), tokens_.row(r) + tokens_.len);
      b.b.push_back(labels_of_rows_[static_cast<size_t>(r)]);
    }
    b.tokens = static_cast<long long>(B) * b.len_a;
    return b;
  }

  float train_step(const Batch& b) override { return model_->train_step(b.a, b.b, b.rows, b.len_a); }
  StepLoss queue_train_step(const Batch& b) override { return model_->queue_train_step(b.a, b.b, b.rows, b.len_a); }
  long long counted(const Batch& b) const override { return b.rows; }
  float train_part(const Batch& b, float weight) override {
    model_->zero_grad();
    const float loss = model_->accumulate(b.a, b.b, b.rows, b.len_a, weight);
    model_->apply_gradients();
    return loss;
  }

  Metrics evaluate(bool held_out, int B, int max_batches) override {
    return each_batch(held_out, B, max_batches, [&](int i, int rows) {
      return model_->evaluate(std::span<const int32_t>(tokens_.row(i), static_cast<size_t>(rows) * tokens_.len),
                              std::span<const int32_t>(labels_of_rows_).subspan(static_cast<size_t>(i), rows), rows,
                              tokens_.len);
    });
  }

  Model& model() const override { return *model_; }
  std::string config_json() const override { return to_json(model_->config()); }
  std::string optimizer_json() const override { return to_json(model_->optimizer()); }

 protected:
  std::map<std::string, std::string> metadata() const override {
    return {{"qkv.tokenizer", tok_.to_json()}, {"qkv.labels", json(labels_).dump()}};
  }

 private:
  Tokenizer tok_;
  std::vector<std::string> labels_;  // class id -> name
  std::unique_ptr<Classifier> model_;
  Padded tokens_;
  std::vector<int32_t> labels_of_rows_;
};

// --- presets ---------------------------------------------------------------------------------------------

const char* const kPresets[] = {"tiny", "small"};

Setup preset(Kind kind, const std::string& name) {
  const bool small = name == "small";
  if (!small && name != "tiny") throw UsageError("unknown preset \"" + name + "\": expected tiny or small");
  switch (kind) {
    case Kind::LM:
      // small: nanoGPT's CPU recipe for char-level Shakespeare (TOOLCHAIN.md).
      if (small)
        return {{{"context", 64}, {"d_model", 128}, {"heads", 4}, {"layers", 4}, {"bias", false}},
                {{"lr", 1e-3}, {"min_lr", 1e-4}, {"warmup_steps", 100}, {"schedule", "cosine"}},
                12,
                ""};
      return {{{"context", 64}, {"d_model", 64}, {"heads", 4}, {"layers", 2}, {"bias", false}}, json::object(), 8, ""};
    case Kind::Seq2Seq:
      if (small)
        return {{{"d_model", 128},
                 {"heads", 4},
                 {"encoder_layers", 3},
                 {"decoder_layers", 3},
                 {"d_ff", 512},
                 {"dropout", 0.1}},
                {{"lr", 5e-4}, {"beta2", 0.98}, {"weight_decay", 0.0}, {"warmup_steps", 100}},
                32,
                ""};
      return {{{"d_model", 64}, {"heads", 4}, {"encoder_layers", 2}, {"decoder_layers", 2}, {"d_ff", 128}},
              {{"lr", 5e-4}, {"beta2", 0.98}, {"weight_decay", 0.0}},
              16,
              ""};
    case Kind::Classifier:
      // tiny: the PyTorch tutorial's classifier (DESIGN.md).
      if (small)
        return {{{"d_model", 128}, {"heads", 4}, {"layers", 4}, {"d_ff", 512}, {"dropout", 0.1}},
                {{"weight_decay", 0.0}},
                32,
                ""};
      return {{{"d_model", 64}, {"heads", 8}, {"layers", 2}, {"d_ff", 128}}, {{"weight_decay", 0.0}}, 16, ""};
  }
  throw Error("unknown model kind");
}

// The config fields the data decides.
const std::vector<std::string>& data_fields(Kind kind) {
  static const std::vector<std::string> lm = {"vocab_size"}, s2s = {"src_vocab", "tgt_vocab"},
                                        cls = {"vocab_size", "classes"};
  return kind == Kind::LM ? lm : kind == Kind::Seq2Seq ? s2s : cls;
}

json header_of(std::span<const uint8_t> bytes, uint64_t& header_size) {
  check(bytes.size() >= 8, "the file is ", bytes.size(), " bytes: expected a safetensors file (at least 8 bytes)");
  header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | bytes[static_cast<size_t>(i)];
  check(header_size <= bytes.size() - 8, "the header length ", header_size, " runs past the end of the file (",
        bytes.size(), " bytes): a truncated file?");
  try {
    return json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_size));
  } catch (const json::exception& e) {
    throw Error(std::string("the safetensors header is not valid JSON: ") + e.what());
  }
}

}  // namespace

Kind parse_kind(const std::string& name) {
  if (name == "lm") return Kind::LM;
  if (name == "seq2seq") return Kind::Seq2Seq;
  if (name == "classifier") return Kind::Classifier;
  throw UsageError("--model " + name + ": expected lm, seq2seq or classifier");
}
const char* kind_name(Kind kind) { return kind == Kind::LM ? "lm" : kind == Kind::Seq2Seq ? "seq2seq" : "classifier"; }
const char* checkpoint_kind(Kind kind) {
  return kind == Kind::LM ? "language_model" : kind == Kind::Seq2Seq ? "seq2seq" : "classifier";
}

std::string read_text(const std::string& path) {
  std::error_code ec;
  check(!std::filesystem::is_directory(path, ec), path, ": is a directory: expected a file");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open for reading (", std::strerror(errno), ")");
  std::ostringstream out;
  out << in.rdbuf();
  check(!in.bad(), path, ": reading failed");
  return out.str();
}

Setup resolve_setup(Kind kind, const std::string& config) {
  if (config.empty()) return preset(kind, "tiny");
  for (const char* name : kPresets)
    if (config == name) return preset(kind, config);
  std::error_code ec;
  if (!std::filesystem::exists(config, ec))
    throw UsageError("--config " + config + ": neither a preset (tiny, small) nor an existing JSON file");
  json j;
  try {
    j = json::parse(read_text(config));
  } catch (const json::exception& e) {
    throw Error(config + ": not valid JSON: " + e.what());
  }
  check(j.is_object(), config,
        ": expected a JSON object {\"preset\", \"model\", \"optimizer\", \"batch\", \"device\"}");
  for (const auto& [key, value] : j.items())
    check(key == "preset" || key == "model" || key == "optimizer" || key == "batch" || key == "device", config,
          ": unknown key \"", key, "\": expected preset, model, optimizer, batch or device");
  std::string name = "tiny";
  if (j.contains("preset")) {
    check(j["preset"].is_string(), config, ": \"preset\" must be a string (tiny or small)");
    name = j["preset"].get<std::string>();
  }
  Setup s;
  try {
    s = preset(kind, name);
  } catch (const UsageError& e) {
    throw Error(config + ": " + e.what());
  }
  for (const char* section : {"model", "optimizer"}) {
    if (!j.contains(section)) continue;
    check(j[section].is_object(), config, ": \"", section, "\" must be a JSON object of ", section, " config fields");
    json& into = std::string(section) == "model" ? s.model : s.optimizer;
    for (const auto& [key, value] : j[section].items()) into[key] = value;
  }
  for (const auto& field : data_fields(kind))
    check(!s.model.contains(field), config, ": model.", field,
          " is set from the data (the tokenizer and the labels): remove it");
  if (j.contains("batch")) {
    check(j["batch"].is_number_integer() && j["batch"].get<int64_t>() >= 1 && j["batch"].get<int64_t>() <= 1 << 20,
          config, ": \"batch\" = ", j["batch"].dump(), " is invalid: expected an integer >= 1");
    s.batch = j["batch"].get<int>();
  }
  if (j.contains("device")) {
    check(j["device"].is_string() && (j["device"] == "cpu" || j["device"] == "cuda"), config,
          ": \"device\" = ", j["device"].dump(), " is invalid: expected \"cpu\" or \"cuda\"");
    s.device = j["device"].get<std::string>();
  }
  return s;
}

std::string describe_presets() {
  std::string out;
  for (Kind kind : {Kind::LM, Kind::Seq2Seq, Kind::Classifier})
    for (const char* name : kPresets) {
      const Setup s = preset(kind, name);
      out += detail::cat("  ", kind_name(kind), " ", name, ": ", s.model.dump(), " batch ", s.batch,
                         s.optimizer.empty() ? std::string() : " optimizer " + s.optimizer.dump(), "\n");
    }
  return out;
}

std::unique_ptr<Task> Task::create(Kind kind, const std::string& path, const std::string& text, const Setup& setup,
                                   const std::string& source, uint64_t seed, const OptimizerConfig& optimizer) {
  json model = setup.model;
  if (!model.contains("seed")) model["seed"] = seed;
  std::unique_ptr<Task> task;
  // Errors in the completed config name where it came from.
  const std::string where = source.empty() ? std::string("the preset") : source;
  const auto build = [&](auto parse) { return prefixed(where, [&] { return parse(model.dump()); }); };
  switch (kind) {
    case Kind::LM: {
      check_text(path, text, "plain text");
      Tokenizer tok = prefixed(path, [&] {
        return setup.tokenizer == "bpe" ? Tokenizer::train_bpe(text, setup.bpe_vocab_size)
                                        : Tokenizer::char_level(text, unk_only());
      });
      // Training stops early when every piece of the text is one token: said, since the vocabulary is then not
      // --vocab-size.
      if (setup.tokenizer == "bpe" && tok.size() < setup.bpe_vocab_size)
        std::fprintf(stderr,
                     "qkv train: the BPE tokenizer has %d tokens, not the %d --vocab-size asked for: every word of %s "
                     "is one token by then, with nothing left to merge\n",
                     tok.size(), setup.bpe_vocab_size, path.c_str());
      model["vocab_size"] = tok.size();
      const auto config = build(language_model_config_from_json);
      auto m = prefixed(where, [&] { return std::make_unique<LanguageModel>(config, optimizer); });
      task = std::make_unique<LmTask>(std::move(tok), std::move(m));
      break;
    }
    case Kind::Seq2Seq: {
      const auto rows = read_tsv(path, text, "source", "target");
      Tokenizer src = Tokenizer::char_level(concat(rows, true), all_specials());
      Tokenizer tgt = Tokenizer::char_level(concat(rows, false), all_specials());
      model["src_vocab"] = src.size();
      model["tgt_vocab"] = tgt.size();
      if (!model.contains("context")) {  // the longest source + <eos> or target + <bos>
        size_t longest = 0;
        for (const Row& r : rows)
          longest = std::max({longest, src.encode(r.first).size() + 1, tgt.encode(r.second).size() + 1});
        model["context"] = longest;
      }
      const auto config = build(seq2seq_config_from_json);
      auto m = prefixed(where, [&] { return std::make_unique<Seq2Seq>(config, optimizer); });
      task = std::make_unique<Seq2SeqTask>(std::move(src), std::move(tgt), std::move(m));
      break;
    }
    case Kind::Classifier: {
      const auto rows = read_tsv(path, text, "label", "text");
      Tokenizer tok = Tokenizer::char_level(concat(rows, false), all_specials());
      std::set<std::string> distinct;
      for (const Row& r : rows) distinct.insert(r.first);
      check(distinct.size() >= 2, path, ": every example has the label \"", rows.front().first,
            "\": expected at least two classes");
      model["vocab_size"] = tok.size();
      model["classes"] = distinct.size();
      if (!model.contains("context")) {  // the longest text + <bos>
        size_t longest = 0;
        for (const Row& r : rows) longest = std::max(longest, tok.encode(r.second).size() + 1);
        model["context"] = longest;
      }
      const auto config = build(classifier_config_from_json);
      auto m = prefixed(where, [&] { return std::make_unique<Classifier>(config, optimizer); });
      task = std::make_unique<ClassifierTask>(std::move(tok),
                                              std::vector<std::string>(distinct.begin(), distinct.end()), std::move(m));
      break;
    }
  }
  task->set_data(path, text);
  return task;
}

std::optional<Tokenizer> folder_tokenizer(const std::string& dir, const std::map<std::string, std::string>& files) {
  try {
    return pretrained_tokenizer(files);
  } catch (const Error& e) {
    throw Error(dir + ": " + e.what());
  }
}

std::vector<int32_t> pretrained_eos_ids(const std::string& dir, int tokenizer_eos) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  json config;
  try {
    config = json::parse(read_text(path));
  } catch (const json::exception& e) {
    throw Error(path + " is not valid JSON: " + e.what());
  }
  const json eos = config.is_object() ? config.value("eos_token_id", json()) : json();
  std::vector<int32_t> ids;
  for (const json& id : eos.is_array() ? eos : json::array({eos})) {
    if (id.is_null()) continue;
    check(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX, path,
          ": eos_token_id is ", eos.dump(), ": expected a token id or a list of them");
    ids.push_back(id.get<int32_t>());
  }
  if (ids.empty() && tokenizer_eos >= 0) ids.push_back(tokenizer_eos);
  return ids;
}

std::unique_ptr<Task> Task::load_pretrained(const std::string& dir, bool ignore_eos) {
  std::optional<Tokenizer> tok = pretrained_tokenizer(dir);
  check(tok.has_value(), dir,
        ": the folder has no tokenizer (tokenizer.json, or vocab.json + merges.txt), which reading text takes");
  auto model = qkv::load_pretrained(dir);
  check(tok->size() <= model->config().vocab_size, dir, ": the tokenizer has ", tok->size(),
        " tokens, more than the model's vocabulary of ", model->config().vocab_size);
  std::vector<int32_t> eos = ignore_eos ? std::vector<int32_t>{} : pretrained_eos_ids(dir, tok->eos_id());
  auto task = std::make_unique<LmTask>(std::move(*tok), std::move(model), std::move(eos));
  task->imported_from = "gpt2";
  task->base_model = dir;
  task->checkpoint_path = dir;
  return task;
}

std::unique_ptr<Task> Task::load(const std::string& path) {
  const std::string text = read_text(path);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  uint64_t header_size = 0;
  const json header = prefixed(path, [&] { return header_of(bytes, header_size); });
  std::map<std::string, std::string> meta;
  if (header.contains("__metadata__") && header["__metadata__"].is_object())
    for (const auto& [key, value] : header["__metadata__"].items())
      if (value.is_string()) meta[key] = value.get<std::string>();
  check(meta.count("qkv.model"), path, ": not a qkv checkpoint (its metadata has no \"qkv.model\")");
  check(meta.count("qkv.tokenizer"), path, ": the checkpoint has no \"qkv.tokenizer\" metadata: it was not written by ",
        "`qkv train`, which stores the tokenizer beside the weights");
  const auto tokenizer = [&](const char* key) {
    check(meta.count(key), path, ": the checkpoint has no \"", key, "\" metadata");
    return prefixed(detail::cat(path, ": ", key), [&] { return Tokenizer::from_json(meta.at(key)); });
  };
  const std::string& kind = meta.at("qkv.model");
  std::unique_ptr<Task> task;
  if (kind == checkpoint_kind(Kind::LM)) {
    task = std::make_unique<LmTask>(tokenizer("qkv.tokenizer"),
                                    prefixed(path, [&] { return LanguageModel::load(bytes); }));
  } else if (kind == checkpoint_kind(Kind::Seq2Seq)) {
    task = std::make_unique<Seq2SeqTask>(tokenizer("qkv.tokenizer"), tokenizer("qkv.tokenizer.target"),
                                         prefixed(path, [&] { return Seq2Seq::load(bytes); }));
  } else if (kind == checkpoint_kind(Kind::Classifier)) {
    check(meta.count("qkv.labels"), path, ": the checkpoint has no \"qkv.labels\" metadata");
    std::vector<std::string> labels;
    try {
      labels = json::parse(meta.at("qkv.labels")).get<std::vector<std::string>>();
    } catch (const json::exception& e) {
      throw Error(path + ": \"qkv.labels\" is not a JSON array of strings: " + e.what());
    }
    task = std::make_unique<ClassifierTask>(tokenizer("qkv.tokenizer"), std::move(labels),
                                            prefixed(path, [&] { return Classifier::load(bytes); }));
  } else {
    throw Error(path + ": holds a \"" + kind + "\": expected a language_model, seq2seq or classifier checkpoint");
  }
  if (meta.count("qkv.train")) {
    try {
      const json t = json::parse(meta.at("qkv.train"));
      task->train = {t.at("seed").get<uint64_t>(), t.at("batch").get<int>(), t.at("steps").get<int>(),
                     t.at("eval_every").get<int>()};
    } catch (const json::exception& e) {
      throw Error(path + ": \"qkv.train\" metadata is malformed: " + e.what());
    }
  }
  if (meta.count("qkv.imported_from")) task->imported_from = meta.at("qkv.imported_from");
  task->checkpoint_path = path;
  return task;
}

void Task::generate(const std::string&, const SamplingOptions&, const std::string&, int, float,
                    const std::function<bool(const std::string&)>&) {
  throw Error(checkpoint_path + ": holds a " + kind_name(kind()) +
              " model: generate needs an lm or seq2seq checkpoint (a classifier is measured with qkv eval)");
}

Batch rows_of(const Batch& b, int first, int n) {
  Batch part;
  part.rows = n;
  part.len_a = b.len_a;
  part.len_b = b.len_b;
  part.tokens = b.tokens * n / std::max(1, b.rows);
  const auto take = [&](const std::vector<int32_t>& from, std::vector<int32_t>& to) {
    const size_t width = from.size() / static_cast<size_t>(std::max(1, b.rows));
    to.assign(from.begin() + static_cast<std::ptrdiff_t>(first * width),
              from.begin() + static_cast<std::ptrdiff_t>((first + n) * width));
  };
  take(b.a, part.a);
  take(b.b, part.b);
  take(b.c, part.c);
  return part;
}

void Task::save(const std::string& path) {
  auto meta = metadata();
  meta["qkv.train"] =
      json{{"seed", train.seed}, {"batch", train.batch}, {"steps", train.steps}, {"eval_every", train.eval_every}}
          .dump();
  if (!imported_from.empty()) meta["qkv.imported_from"] = imported_from;
  write_safetensors_atomic(path, model().save(true, meta));
}

}  // namespace qkv::cli
