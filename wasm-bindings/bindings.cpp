// Embind glue: converts JS values to the public C++ API's types and back, and turns a C++ exception into
// a JS Error carrying its message. No math and no validation of its own beyond JS types (the core
// validates values, so native users get the same checks).
//
// What crosses: configs as plain objects with camelCase keys (one field list per config below, read and
// written by the same visitor), token ids as Int32Array, checkpoints as Uint8Array, results as fresh
// typed arrays (copies out of the wasm heap, never views of it) and plain objects.
#include <emscripten.h>
#include <emscripten/bind.h>
#include <emscripten/heap.h>
#include <emscripten/val.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/qkv.h"
#include "qkv/safetensors.h"
#include "qkv/sampling.h"
#include "qkv/seq2seq.h"
#include "qkv/tokenizer.h"

using emscripten::val;

namespace {

// A JS argument of the wrong type: becomes a JS TypeError (everything else a JS Error).
struct TypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The error of the last call that failed, taken by takeError(). Errors never cross into JS as exceptions
// thrown through wasm frames: that would skip the C++ destructors (leaking heap memory and the JS objects
// held by `val` arguments). Every bound entry point runs its whole body in guarded(), which catches, records
// the message and returns normally with an empty value; the JS side (web/src/core.ts) then throws.
struct LastError {
  std::string message;
  bool type_error = false;
  bool set = false;
};
LastError last_error;

template <class F>
auto guarded(F&& f) -> decltype(f()) {
  using R = decltype(f());
  try {
    return f();
  } catch (const TypeError& e) {
    last_error = {e.what(), true, true};
  } catch (const std::bad_alloc&) {
    last_error = {"out of memory: the wasm heap could not grow (it is limited to 4 GiB)", false, true};
  } catch (const std::exception& e) {
    last_error = {e.what(), false, true};
  }
  if constexpr (std::is_same_v<R, val>) {
    return val::undefined();
  } else if constexpr (!std::is_void_v<R>) {
    return R{};
  }
}

// { message, typeError } of the last failed call, or undefined; clears it.
val take_error() {
  if (!last_error.set) return val::undefined();
  val out = val::object();
  out.set("message", last_error.message);
  out.set("typeError", last_error.type_error);
  last_error = {};
  return out;
}

[[noreturn]] void throw_type_error(const std::string& message) { throw TypeError(message); }

// "a Float32Array", "an Array".
std::string article(const std::string& name) {
  const bool vowel = !name.empty() && std::string("aeiouAEIOU").find(name[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + name;
}

// A JS value for an error message: `"abc" (a string)`, `1.5 (a number)`, `an Array`, `null`.
std::string describe(const val& v) {
  if (v.isNull()) return "null";
  if (v.isUndefined()) return "undefined";
  const std::string type = v.typeOf().as<std::string>();
  if (type == "string") {
    std::string s = v.as<std::string>();
    if (s.size() > 20) s = s.substr(0, 20) + "...";
    return val::global("JSON").call<std::string>("stringify", val(s)) + " (a string)";
  }
  if (type == "number" || type == "boolean" || type == "bigint")
    return val::global("String")(v).as<std::string>() + " (a " + type + ")";
  if (type == "object") {
    const val ctor = v["constructor"];
    if (!ctor.isUndefined() && !ctor.isNull() && ctor["name"].isString())
      return article(ctor["name"].as<std::string>());
    return "an object";
  }
  return article(type);
}

std::vector<int32_t> int32_array(const val& v, const char* name) {
  if (!v.instanceof (val::global("Int32Array")))
    throw_type_error(std::string(name) + " must be an Int32Array, got " + describe(v));
  return emscripten::convertJSArrayToNumberVector<int32_t>(v);
}

std::vector<uint8_t> uint8_array(const val& v, const char* name) {
  if (!v.instanceof (val::global("Uint8Array")))
    throw_type_error(std::string(name) + " must be a Uint8Array, got " + describe(v));
  return emscripten::convertJSArrayToNumberVector<uint8_t>(v);
}

// A plain object of string values (save's metadata) as the core's map. Values must be strings already
// (web/src/validate.ts checks and names them for the user): this only refuses what it cannot convert.
std::map<std::string, std::string> string_map(const val& v, const char* name) {
  std::map<std::string, std::string> out;
  if (v.isUndefined() || v.isNull()) return out;
  if (v.typeOf().as<std::string>() != "object")
    throw_type_error(std::string(name) + " must be an object of string values, got " + describe(v));
  const val keys = val::global("Object").call<val>("keys", v);
  const int n = keys["length"].as<int>();
  for (int i = 0; i < n; ++i) {
    const std::string key = keys[i].as<std::string>();
    const val value = v[key];
    if (!value.isString())
      throw_type_error(std::string(name) + "[\"" + key + "\"] must be a string, got " + describe(value));
    out.emplace(key, value.as<std::string>());
  }
  return out;
}

// Fresh JS typed arrays holding a copy of `data` (slice() copies out of the heap into an ordinary buffer).
val to_js(const std::vector<float>& data) {
  return val(emscripten::typed_memory_view(data.size(), data.data())).call<val>("slice");
}
val to_js(const std::vector<int32_t>& data) {
  return val(emscripten::typed_memory_view(data.size(), data.data())).call<val>("slice");
}
val to_js(const std::vector<uint8_t>& data) {
  return val(emscripten::typed_memory_view(data.size(), data.data())).call<val>("slice");
}

val to_js(const qkv::Metrics& m) {
  val out = val::object();
  out.set("loss", m.loss);
  out.set("accuracy", m.accuracy);
  out.set("perplexity", m.perplexity);
  out.set("count", static_cast<double>(m.count));
  return out;
}

val to_js(const qkv::MemoryUsage& m) {
  val out = val::object();
  out.set("parameters", static_cast<double>(m.parameters));
  out.set("gradients", static_cast<double>(m.gradients));
  out.set("optimizer", static_cast<double>(m.optimizer));
  out.set("activations", static_cast<double>(m.activations));
  out.set("total", static_cast<double>(m.total()));
  return out;
}

// --- configs -------------------------------------------------------------------------------------------
// One list of (camelCase key, field) per config, walked by a Reader (JS -> C++) and a Writer (C++ -> JS).

template <class V>
void visit_optimizer(V& v, qkv::OptimizerConfig& o) {
  v("optimizer", o.kind);
  v("lr", o.lr);
  v("beta1", o.beta1);
  v("beta2", o.beta2);
  v("eps", o.eps);
  v("weightDecay", o.weight_decay);
  v("decayMatricesOnly", o.decay_matrices_only);
  v("gradClip", o.grad_clip);
  v("schedule", o.schedule);
  v("warmupSteps", o.warmup_steps);
  v("totalSteps", o.total_steps);
  v("minLr", o.min_lr);
  v("nonFinite", o.non_finite);
}

// The layer choices every model shares.
template <class V, class C>
void visit_stack(V& v, C& c) {
  v("dFF", c.d_ff);
  v("seed", c.seed);
  v("activation", c.activation);
  v("norm", c.norm);
  v("bias", c.bias);
  v("dropout", c.dropout);
  v("positions", c.positions);
  v("scaleEmbedding", c.scale_embedding);
  v("finalNorm", c.final_norm);
}

template <class V>
void visit(V& v, qkv::LanguageModelConfig& c) {
  v("vocabSize", c.vocab_size, true);
  v("context", c.context, true);
  v("dModel", c.d_model, true);
  v("heads", c.heads, true);
  v("layers", c.layers, true);
  visit_stack(v, c);
  v("tieHead", c.tie_head);
}

template <class V>
void visit(V& v, qkv::Seq2SeqConfig& c) {
  v("srcVocab", c.src_vocab, true);
  v("tgtVocab", c.tgt_vocab, true);
  v("context", c.context, true);
  v("dModel", c.d_model, true);
  v("heads", c.heads, true);
  v("encoderLayers", c.encoder_layers, true);
  v("decoderLayers", c.decoder_layers, true);
  visit_stack(v, c);
  v("padId", c.pad_id);
  v("labelSmoothing", c.label_smoothing);
}

template <class V>
void visit(V& v, qkv::ClassifierConfig& c) {
  v("vocabSize", c.vocab_size, true);
  v("context", c.context, true);
  v("dModel", c.d_model, true);
  v("heads", c.heads, true);
  v("layers", c.layers, true);
  v("classes", c.classes, true);
  visit_stack(v, c);
  v("pooling", c.pooling);
  v("head", c.head);
  v("padId", c.pad_id);
}

// Reads the fields of a JS config object into C++ configs; undefined keeps the C++ default. Type errors
// (and unknown or missing keys) are TypeErrors naming the key; values are checked by the core.
class Reader {
 public:
  Reader(const val& config, const char* model) : config_(config), model_(model) {
    if (config.typeOf().as<std::string>() != "object" || config.isNull())
      throw_type_error(std::string("config must be an object, got ") + describe(config));
  }

  void operator()(const char* key, int& out, bool required = false) {
    const val v = get(key, required);
    if (v.isUndefined()) return;
    const double d = number(key, v);
    if (d != std::floor(d) || std::abs(d) > 2147483647.0) fail(key, "must be an integer", v);
    out = static_cast<int>(d);
  }
  void operator()(const char* key, uint64_t& out) {
    const val v = get(key, false);
    if (v.isUndefined()) return;
    const double d = number(key, v);
    if (d != std::floor(d) || d < 0 || d > 9007199254740991.0) fail(key, "must be an integer >= 0", v);
    out = static_cast<uint64_t>(d);
  }
  void operator()(const char* key, float& out) {
    const val v = get(key, false);
    if (!v.isUndefined()) out = static_cast<float>(number(key, v));
  }
  void operator()(const char* key, bool& out) {
    const val v = get(key, false);
    if (v.isUndefined()) return;
    if (!v.isTrue() && !v.isFalse()) fail(key, "must be true or false", v);
    out = v.isTrue();
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(const char* key, E& out) {
    const val v = get(key, false);
    if (v.isUndefined()) return;
    if (!v.isString()) fail(key, "must be a string", v);
    const std::string field = std::string("config.") + key;
    out = parse(v.as<std::string>(), field.c_str(), static_cast<E*>(nullptr));
  }

  // After every field was read: a key that no field took is a typo, refused rather than ignored.
  void refuse_unknown_keys() const {
    const val keys = val::global("Object").call<val>("keys", config_);
    const int n = keys["length"].as<int>();
    for (int i = 0; i < n; ++i) {
      const std::string key = keys[i].as<std::string>();
      bool found = false;
      for (const std::string& k : seen_) found = found || k == key;
      if (found) continue;
      std::string known;
      for (const std::string& k : seen_) known += (known.empty() ? "" : ", ") + k;
      throw_type_error("config." + key + " is not a " + model_ + " option (known: " + known + ")");
    }
  }

 private:
  val get(const char* key, bool required) {
    seen_.emplace_back(key);
    val v = config_[key];
    if (required && v.isUndefined()) throw_type_error(std::string("config.") + key + " is missing: it is required");
    return v;
  }
  double number(const char* key, const val& v) const {
    if (!v.isNumber()) fail(key, "must be a number", v);
    const double d = v.as<double>();
    if (!std::isfinite(d)) fail(key, "must be a finite number", v);
    return d;
  }
  [[noreturn]] static void fail(const char* key, const char* expected, const val& v) {
    throw_type_error(std::string("config.") + key + " " + expected + ", got " + describe(v));
  }
  static qkv::Activation parse(const std::string& s, const char* f, qkv::Activation*) {
    return qkv::parse_activation(s, f);
  }
  static qkv::NormPosition parse(const std::string& s, const char* f, qkv::NormPosition*) {
    return qkv::parse_norm(s, f);
  }
  static qkv::Positions parse(const std::string& s, const char* f, qkv::Positions*) {
    return qkv::parse_positions(s, f);
  }
  static qkv::Pooling parse(const std::string& s, const char* f, qkv::Pooling*) { return qkv::parse_pooling(s, f); }
  static qkv::ClassifierHead parse(const std::string& s, const char* f, qkv::ClassifierHead*) {
    return qkv::parse_head(s, f);
  }
  static qkv::OptimizerKind parse(const std::string& s, const char* f, qkv::OptimizerKind*) {
    return qkv::parse_optimizer_kind(s, f);
  }
  static qkv::Schedule parse(const std::string& s, const char* f, qkv::Schedule*) { return qkv::parse_schedule(s, f); }
  static qkv::NonFinite parse(const std::string& s, const char* f, qkv::NonFinite*) {
    return qkv::parse_non_finite(s, f);
  }

  const val& config_;
  std::string model_;
  std::vector<std::string> seen_;
};

// The shortest decimal that reads back as this float: 1e-3f shows as 0.001, not 0.0010000000474974513.
double shortest(float f) {
  char buf[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return f;
}

// Writes C++ config fields into a JS object, enums as their names.
class Writer {
 public:
  val out = val::object();
  template <class T>
  void operator()(const char* key, const T& value, bool = false) {
    if constexpr (std::is_enum_v<T>) {
      out.set(key, qkv::to_string(value));
    } else if constexpr (std::is_same_v<T, bool>) {
      out.set(key, value);
    } else if constexpr (std::is_same_v<T, float>) {
      out.set(key, shortest(value));
    } else {
      out.set(key, static_cast<double>(value));
    }
  }
};

template <class Config>
std::pair<Config, qkv::OptimizerConfig> read_config(const val& config, const char* model) {
  Reader reader(config, model);
  Config c;
  qkv::OptimizerConfig o;
  visit(reader, c);
  visit_optimizer(reader, o);
  reader.refuse_unknown_keys();
  return {c, o};
}

// The model's whole configuration (defaults filled in) and its optimizer's, as one flat object.
template <class Config>
val config_to_js(Config c, qkv::OptimizerConfig o) {
  Writer writer;
  visit(writer, c);
  visit_optimizer(writer, o);
  return writer.out;
}

qkv::SamplingOptions sampling_options(const val& options) {
  if (options.typeOf().as<std::string>() != "object" || options.isNull())
    throw_type_error("options must be an object, got " + describe(options));
  qkv::SamplingOptions s;
  const auto number = [&](const char* key) -> std::optional<double> {
    const val v = options[key];
    if (v.isUndefined()) return std::nullopt;
    if (!v.isNumber()) throw_type_error(std::string("options.") + key + " must be a number, got " + describe(v));
    return v.as<double>();
  };
  const auto integer = [&](const char* key) -> std::optional<double> {
    const auto v = number(key);
    if (v && (*v != std::floor(*v) || std::abs(*v) > 9007199254740991.0))
      throw_type_error(std::string("options.") + key + " must be an integer, got " + describe(options[key]));
    return v;
  };
  if (auto v = integer("maxTokens")) s.max_new_tokens = static_cast<int>(std::clamp(*v, -1.0, 2147483647.0));
  if (auto v = number("temperature")) s.temperature = static_cast<float>(*v);
  if (auto v = integer("topK")) s.top_k = static_cast<int>(std::clamp(*v, -1.0, 2147483647.0));
  if (auto v = number("topP")) s.top_p = static_cast<float>(*v);
  if (auto v = number("repetitionPenalty")) s.repetition_penalty = static_cast<float>(*v);
  if (auto v = integer("seed")) {
    if (*v < 0) throw_type_error("options.seed must be an integer >= 0, got " + describe(options["seed"]));
    s.seed = static_cast<uint64_t>(*v);
  }
  const val stop = options["stopTokens"];
  if (!stop.isUndefined()) s.stop_tokens = int32_array(stop, "options.stopTokens");
  const val cache = options["useCache"];
  if (!cache.isUndefined()) {
    if (!cache.isTrue() && !cache.isFalse())
      throw_type_error("options.useCache must be true or false, got " + describe(cache));
    s.use_cache = cache.isTrue();
  }
  return s;
}

qkv::AttentionKind attention_kind(const std::string& kind) {
  if (kind == "encoder") return qkv::AttentionKind::EncoderSelf;
  if (kind == "decoder") return qkv::AttentionKind::DecoderSelf;
  if (kind == "cross") return qkv::AttentionKind::Cross;
  throw_type_error("kind = \"" + kind + "\" is unknown: expected \"encoder\", \"decoder\" or \"cross\"");
}

// --- models ----------------------------------------------------------------------------------------------
// Every entry point runs its whole body in guarded(): see LastError.

// What every model's binding shares: create and load (nullptr, JS null, on error, with the error left for
// takeError()), checkpoints, the learning rate and what it reports about itself. Self is the binding class
// (CRTP), Model the core's class, Config its config; Self::kName names the kind in config errors.
template <class Self, class Model, class Config>
class JsModel {
 public:
  explicit JsModel(std::unique_ptr<Model> m) : m_(std::move(m)) {}

  static Self* create(val config) {
    return guarded([&] {
      const auto c = read_config<Config>(config, Self::kName);
      return new Self(std::make_unique<Model>(c.first, c.second));
    });
  }
  static Self* load(val bytes) {
    return guarded([&] { return new Self(Model::load(uint8_array(bytes, "bytes"))); });
  }

  val save(bool with_optimizer, val metadata) {
    return guarded([&] { return to_js(m_->save(with_optimizer, string_map(metadata, "options.metadata"))); });
  }
  void load_weights(val bytes) {
    guarded([&] { m_->load_weights(uint8_array(bytes, "bytes")); });
  }
  void set_learning_rate(float lr) {
    guarded([&] { m_->set_learning_rate(lr); });
  }
  double num_parameters() const { return static_cast<double>(m_->num_parameters()); }
  int step() const { return m_->step(); }
  val config() const { return config_to_js(m_->config(), m_->optimizer()); }
  val memory() const { return to_js(m_->memory()); }

 protected:
  // What a trainStep resolves to: the loss, and whether the model skipped the update (NonFinite::Skip).
  val step_result(float loss) const {
    val out = val::object();
    out.set("loss", loss);
    out.set("skipped", m_->last_step_skipped());
    out.set("skippedSteps", m_->skipped_steps());
    return out;
  }

  std::unique_ptr<Model> m_;
};

// A generation in progress (LanguageModel::start_generation), one token per next(): what the package's
// stream() and generate({ onToken }) step through, handing JS the thread between two tokens. It must be
// deleted before its model (web/src/core.ts does so on dispose).
class JsGeneration {
 public:
  explicit JsGeneration(qkv::LanguageModel::Generation g) : g_(std::move(g)) {}
  // The next token, or -1 once generation has ended (and on error, left for takeError()).
  int next() {
    return guarded([&] { return g_.next().value_or(-1); });
  }

 private:
  qkv::LanguageModel::Generation g_;
};

class JsLanguageModel : public JsModel<JsLanguageModel, qkv::LanguageModel, qkv::LanguageModelConfig> {
 public:
  static constexpr const char* kName = "LanguageModel";
  using JsModel::JsModel;

  val train_step(val inputs, val targets, int batch, int seq) {
    return guarded([&] {
      return step_result(m_->train_step(int32_array(inputs, "inputs"), int32_array(targets, "targets"), batch, seq));
    });
  }
  val evaluate(val inputs, val targets, int batch, int seq) {
    return guarded([&] {
      return to_js(m_->evaluate(int32_array(inputs, "inputs"), int32_array(targets, "targets"), batch, seq));
    });
  }
  val logits(val inputs, int batch, int seq) {
    return guarded([&] { return to_js(m_->logits(int32_array(inputs, "inputs"), batch, seq)); });
  }
  val attention(int layer) const {
    return guarded([&] { return to_js(m_->attention(layer)); });
  }
  val generate(val prompt, val options) {
    return guarded([&] {
      const auto p = int32_array(prompt, "prompt");
      return to_js(m_->generate(p, sampling_options(options)));
    });
  }
  // nullptr (JS null) on error, with the error left for takeError().
  JsGeneration* start_generation(val prompt, val options) {
    return guarded([&] {
      const auto p = int32_array(prompt, "prompt");
      return new JsGeneration(m_->start_generation(p, sampling_options(options)));
    });
  }
};

class JsSeq2Seq : public JsModel<JsSeq2Seq, qkv::Seq2Seq, qkv::Seq2SeqConfig> {
 public:
  static constexpr const char* kName = "Seq2Seq";
  using JsModel::JsModel;

  val train_step(val src, val tgt_in, val tgt_out, int batch, int src_len, int tgt_len) {
    return guarded([&] {
      return step_result(m_->train_step(int32_array(src, "src"), int32_array(tgt_in, "tgtIn"),
                                        int32_array(tgt_out, "tgtOut"), batch, src_len, tgt_len));
    });
  }
  val evaluate(val src, val tgt_in, val tgt_out, int batch, int src_len, int tgt_len) {
    return guarded([&] {
      return to_js(m_->evaluate(int32_array(src, "src"), int32_array(tgt_in, "tgtIn"), int32_array(tgt_out, "tgtOut"),
                                batch, src_len, tgt_len));
    });
  }
  val logits(val src, val tgt_in, int batch, int src_len, int tgt_len) {
    return guarded([&] {
      return to_js(m_->logits(int32_array(src, "src"), int32_array(tgt_in, "tgtIn"), batch, src_len, tgt_len));
    });
  }
  // options: { bos, eos, maxTokens, beamWidth, lengthPenalty, useCache }, types checked by the package.
  val generate(val src, int batch, int src_len, val options) {
    return guarded([&] {
      qkv::DecodeOptions d;
      d.bos = options["bos"].as<int>();
      d.eos = options["eos"].as<int>();
      d.max_len = options["maxTokens"].as<int>();
      d.beam_width = options["beamWidth"].as<int>();
      d.length_penalty = options["lengthPenalty"].as<float>();
      d.use_cache = options["useCache"].as<bool>();
      return to_js(m_->generate(int32_array(src, "src"), batch, src_len, d).tokens);
    });
  }
  val attention(std::string kind, int layer) const {
    return guarded([&] { return to_js(m_->attention(attention_kind(kind), layer)); });
  }
};

class JsClassifier : public JsModel<JsClassifier, qkv::Classifier, qkv::ClassifierConfig> {
 public:
  static constexpr const char* kName = "Classifier";
  using JsModel::JsModel;

  val train_step(val tokens, val labels, int batch, int seq) {
    return guarded([&] {
      return step_result(m_->train_step(int32_array(tokens, "tokens"), int32_array(labels, "labels"), batch, seq));
    });
  }
  val evaluate(val tokens, val labels, int batch, int seq) {
    return guarded(
        [&] { return to_js(m_->evaluate(int32_array(tokens, "tokens"), int32_array(labels, "labels"), batch, seq)); });
  }
  val logits(val tokens, int batch, int seq) {
    return guarded([&] { return to_js(m_->logits(int32_array(tokens, "tokens"), batch, seq)); });
  }
  val attention(int layer) const {
    return guarded([&] { return to_js(m_->attention(layer)); });
  }
};

// --- tokenizers ------------------------------------------------------------------------------------------

qkv::SpecialTokens special_tokens(const val& specials) {
  qkv::SpecialTokens s;
  if (specials.isUndefined()) return s;
  if (specials.typeOf().as<std::string>() != "object" || specials.isNull())
    throw_type_error("options.specials must be an object { pad?, bos?, eos?, unk? }, got " + describe(specials));
  bool* fields[4] = {&s.pad, &s.bos, &s.eos, &s.unk};
  const char* names[4] = {"pad", "bos", "eos", "unk"};
  for (int i = 0; i < 4; ++i) {
    const val v = specials[names[i]];
    if (v.isUndefined()) continue;
    if (!v.isTrue() && !v.isFalse())
      throw_type_error(std::string("options.specials.") + names[i] + " must be true or false, got " + describe(v));
    *fields[i] = v.isTrue();
  }
  return s;
}

class JsTokenizer {
 public:
  explicit JsTokenizer(qkv::Tokenizer t) : t_(std::move(t)) {}

  // nullptr (JS null) on error, with the error left for takeError().
  static JsTokenizer* char_level(std::string text, val specials) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::char_level(text, special_tokens(specials))); });
  }
  static JsTokenizer* byte_level(val specials) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::byte_level(special_tokens(specials))); });
  }
  static JsTokenizer* word_level(std::string text, int max_vocab, val specials, bool lowercase) {
    return guarded([&] {
      return new JsTokenizer(qkv::Tokenizer::word_level(text, max_vocab, special_tokens(specials), lowercase));
    });
  }
  static JsTokenizer* from_json(std::string json) {
    return guarded([&] { return new JsTokenizer(qkv::Tokenizer::from_json(json)); });
  }

  std::string to_json() const { return t_.to_json(); }
  // `text` arrives as its UTF-8 bytes (a JS string, or a Uint8Array of raw bytes).
  val encode(std::string text, bool add_bos, bool add_eos) const {
    return guarded([&] { return to_js(t_.encode(text, add_bos, add_eos)); });
  }
  // The decoded bytes: the JS side reads them as UTF-8 (a byte tokenizer may decode to any bytes).
  val decode(val ids, bool skip_special) const {
    return guarded([&] {
      const std::string text = t_.decode(int32_array(ids, "ids"), skip_special);
      return to_js(std::vector<uint8_t>(text.begin(), text.end()));
    });
  }
  // kind, size, the special ids (-1: absent), lowercase, and every token's bytes in id order.
  val info() const {
    val out = val::object();
    out.set("kind", t_.kind());
    out.set("size", t_.size());
    out.set("padId", t_.pad_id());
    out.set("bosId", t_.bos_id());
    out.set("eosId", t_.eos_id());
    out.set("unkId", t_.unk_id());
    out.set("lowercase", t_.lowercase());
    val vocab = val::array();
    for (const std::string& t : t_.vocabulary())
      vocab.call<void>("push", to_js(std::vector<uint8_t>(t.begin(), t.end())));
    out.set("vocabulary", vocab);
    return out;
  }

 private:
  qkv::Tokenizer t_;
};

// --- checkpoints and runtime ---------------------------------------------------------------------------

// The "__metadata__" of a safetensors file (a qkv checkpoint, or one written by `qkv train`).
val checkpoint_metadata(val bytes) {
  return guarded([&] {
    const qkv::SafetensorsFile f = qkv::parse_safetensors(uint8_array(bytes, "bytes"));
    // Object.fromEntries defines own properties, so any key (even "__proto__") comes back as a key.
    val entries = val::array();
    for (const auto& [key, value] : f.metadata) {
      val entry = val::array();
      entry.set(0, key);
      entry.set(1, value);
      entries.call<void>("push", entry);
    }
    return val::global("Object").call<val>("fromEntries", entries);
  });
}

std::string version() { return qkv::version(); }
std::string simd() { return qkv::active_isa(); }
bool threaded() { return qkv::threaded_build(); }
int max_threads() { return qkv::max_threads(); }
int num_threads() { return qkv::num_threads(); }
void set_threads(int n) {
  guarded([&] { qkv::set_num_threads(n); });
}
double heap_size() { return static_cast<double>(emscripten_get_heap_size()); }
double heap_max() { return static_cast<double>(emscripten_get_heap_max()); }
// Bytes malloc has handed out and not taken back (the heap itself only grows, so this is what shows a leak).
double heap_used() { return static_cast<double>(mallinfo().uordblks); }

// The Embind class of a model binding with what JsModel gives every kind; the caller adds the rest.
template <class T>
emscripten::class_<T> model_class(const char* name) {
  emscripten::class_<T> c(name);
  c.class_function("create", &T::create, emscripten::allow_raw_pointers())
      .class_function("load", &T::load, emscripten::allow_raw_pointers())
      .function(
          "save", +[](T& t, bool with_optimizer, val metadata) { return t.save(with_optimizer, metadata); })
      .function(
          "loadWeights", +[](T& t, val bytes) { t.load_weights(bytes); })
      .function(
          "setLearningRate", +[](T& t, float lr) { t.set_learning_rate(lr); })
      .function(
          "numParameters", +[](const T& t) { return t.num_parameters(); })
      .function(
          "step", +[](const T& t) { return t.step(); })
      .function(
          "config", +[](const T& t) { return t.config(); })
      .function(
          "memory", +[](const T& t) { return t.memory(); });
  return c;
}

}  // namespace

EMSCRIPTEN_BINDINGS(qkv) {
  using emscripten::allow_raw_pointers;
  emscripten::function("version", &version);
  emscripten::function("simd", &simd);
  emscripten::function("threaded", &threaded);
  emscripten::function("maxThreads", &max_threads);
  emscripten::function("numThreads", &num_threads);
  emscripten::function("setThreads", &set_threads);
  emscripten::function("heapSize", &heap_size);
  emscripten::function("heapMax", &heap_max);
  emscripten::function("heapUsed", &heap_used);
  emscripten::function("checkpointMetadata", &checkpoint_metadata);
  emscripten::function("takeError", &take_error);

  model_class<JsLanguageModel>("LanguageModel")
      .function("trainStep", &JsLanguageModel::train_step)
      .function("evaluate", &JsLanguageModel::evaluate)
      .function("logits", &JsLanguageModel::logits)
      .function("attention", &JsLanguageModel::attention)
      .function("generate", &JsLanguageModel::generate)
      .function("startGeneration", &JsLanguageModel::start_generation, allow_raw_pointers());

  emscripten::class_<JsGeneration>("Generation").function("next", &JsGeneration::next);

  model_class<JsSeq2Seq>("Seq2Seq")
      .function("trainStep", &JsSeq2Seq::train_step)
      .function("evaluate", &JsSeq2Seq::evaluate)
      .function("logits", &JsSeq2Seq::logits)
      .function("generate", &JsSeq2Seq::generate)
      .function("attention", &JsSeq2Seq::attention);

  model_class<JsClassifier>("Classifier")
      .function("trainStep", &JsClassifier::train_step)
      .function("evaluate", &JsClassifier::evaluate)
      .function("logits", &JsClassifier::logits)
      .function("attention", &JsClassifier::attention);

  emscripten::class_<JsTokenizer>("Tokenizer")
      .class_function("charLevel", &JsTokenizer::char_level, allow_raw_pointers())
      .class_function("byteLevel", &JsTokenizer::byte_level, allow_raw_pointers())
      .class_function("wordLevel", &JsTokenizer::word_level, allow_raw_pointers())
      .class_function("fromJSON", &JsTokenizer::from_json, allow_raw_pointers())
      .function("toJSON", &JsTokenizer::to_json)
      .function("encode", &JsTokenizer::encode)
      .function("decode", &JsTokenizer::decode)
      .function("info", &JsTokenizer::info);
}
