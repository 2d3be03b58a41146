#pragma once
// Configs across the boundary: one list of (camelCase key, field) per config, walked by a Reader (JS -> C++)
// and a Writer (C++ -> JS); and the options objects of generation.
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "convert.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/optimizer.h"
#include "qkv/options.h"
#include "qkv/sampling.h"
#include "qkv/seq2seq.h"

namespace qkv::js {

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
double shortest(float f);

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

// A generation's options ({ maxTokens, temperature, topK, topP, repetitionPenalty, seed, stopTokens,
// useCache }) as the core's; TypeErrors name the key.
qkv::SamplingOptions sampling_options(const val& options);
// "encoder", "decoder" or "cross".
qkv::AttentionKind attention_kind(const std::string& kind);

}  // namespace qkv::js
