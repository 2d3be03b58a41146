#pragma once
// What every model's binding shares (JsModel) and the Embind class that binds it (model_class); each model
// kind's file adds its own calls.
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "config.h"
#include "convert.h"
#include "exec/webgpu/webgpu_backend.h"
#include "qkv/checkpoint_loader.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/lora.h"
#include "qkv/lora_files.h"

namespace qkv::js {

// Where create() and load() put new models: the CPU (the wasm core), or the GPU the qkv Worker connected
// (runtime.cpp: webgpuConnect).
inline Device& default_device_slot() {
  static Device d = Device::CPU;
  return d;
}
inline Device default_device() { return default_device_slot(); }
inline void set_default_device(Device d) { default_device_slot() = d; }

// Every entry point runs its whole body in guarded(): see LastError.

// What every model's binding shares: create and load (nullptr, JS null, on error, with the error left for
// takeError()), checkpoints, the learning rate and what it reports about itself. Self is the binding class
// (CRTP), Model the core's class, Config its config; Self::kName names the kind in config errors.
template <class Self, class Model, class Config>
class JsModel {
 public:
  using CoreModel = Model;
  explicit JsModel(std::unique_ptr<Model> m, std::vector<uint8_t> snapshot = {}) : m_(std::move(m)) {
    keep(std::move(snapshot));
  }

  static Self* create(val config) {
    return guarded([&] {
      const auto c = read_config<Config>(config, Self::kName);
      return new Self(std::make_unique<Model>(c.first, c.second, default_device()));
      // (JsModel's constructor keeps the host copy a model on the GPU falls back to.)
    });
  }
  static Self* load(val bytes) {
    return guarded([&] {
      const auto in = uint8_array(bytes, "bytes");
      std::unique_ptr<Model> m = Model::load(in);
      if (default_device() == Device::CPU) return new Self(std::move(m));
      m->to(default_device());
      return new Self(std::move(m), std::vector<uint8_t>(in.begin(), in.end()));
    });
  }

  val save(bool with_optimizer, val metadata) {
    return run([&] {
      std::vector<uint8_t> bytes = m_->save(with_optimizer, string_map(metadata, "options.metadata"));
      val out = to_js(bytes);
      if (with_optimizer) keep(std::move(bytes));
      return out;
    });
  }
  void load_weights(val bytes) {
    run([&] {
      m_->load_weights(uint8_array(bytes, "bytes"));
      keep({});
    });
  }
  void set_learning_rate(float lr) {
    run([&] { m_->set_learning_rate(lr); });
  }
  double num_parameters() const { return static_cast<double>(m_->num_parameters()); }
  int step() const { return m_->step(); }
  val config() const { return config_to_js(m_->config(), m_->optimizer()); }
  val memory() const { return to_js(m_->memory()); }
  // options: { weights: "int8" | "q4" | "f16" | "bf16", embedding?: boolean } (the core checks the name).
  void quantize(val options) {
    run([&] {
      QuantizeOptions o;
      const val embedding = options["embedding"];
      if (!embedding.isUndefined()) o.embedding = embedding.as<bool>();
      const val activations = options["activations"];
      if (!activations.isUndefined())
        o.activations = quant_activations_from_string(activations.as<std::string>(), "options.activations");
      m_->quantize(quantized_format_from_string(options["weights"].as<std::string>(), "options.weights"), o);
      keep({});  // a model on the GPU falls back to its quantized state
    });
  }
  void set_recompute(const std::string& mode) {
    run([&] { m_->set_recompute(recompute_from_string(mode, "mode")); });
  }
  std::string recompute() const { return to_string(m_->recompute()); }
  void set_quant_activations(const std::string& activations) {
    run([&] { m_->set_quant_activations(quant_activations_from_string(activations, "activations")); });
  }
  // { name: "int8", ... } for each packed tensor.
  val weight_formats() const {
    val out = val::object();
    for (const auto& [name, f] : m_->weight_formats()) out.set(name, std::string(to_string(f)));
    return out;
  }
  // options: { rank, alpha, dropout, targets: string[], seed } with every field present (web/src/validate.ts
  // checkLora fills the defaults in); the core validates them again (qkv::Error naming the option).
  void add_lora(val options) {
    run([&] {
      LoraOptions o;
      o.rank = options["rank"].as<int>();
      o.alpha = options["alpha"].as<float>();
      o.dropout = options["dropout"].as<float>();
      o.seed = static_cast<uint64_t>(options["seed"].as<double>());
      o.targets = emscripten::vecFromJSArray<std::string>(options["targets"]);
      m_->add_lora(o);
      keep({});  // a model on the GPU falls back to its state with the adapters
    });
  }
  void merge_lora() {
    run([&] {
      m_->merge_lora();
      keep({});
    });
  }
  void remove_lora() {
    run([&] {
      m_->remove_lora();
      keep({});
    });
  }
  // names: "qkv" or "gpt2" (web/src/model.ts checks it). { config: adapter_config.json's text, safetensors: bytes }.
  val save_adapter(const std::string& names) {
    return run([&] {
      if (names != "qkv" && names != "gpt2") {
        throw qkv::Error("options.names = \"" + names + "\" is not an adapter naming: expected \"qkv\" or \"gpt2\"");
      }
      AdapterFiles f = qkv::save_adapter(*m_, names == "gpt2" ? AdapterNames::Gpt2 : AdapterNames::Qkv);
      val out = val::object();
      out.set("config", f.config_json);
      out.set("safetensors", to_js(f.safetensors));
      return out;
    });
  }
  void load_adapter(std::string config, val safetensors) {
    run([&] {
      qkv::load_adapter(*m_, AdapterFiles{std::move(config), uint8_array(safetensors, "files.safetensors")});
      keep({});
    });
  }
  // { rank, alpha, dropout, targets, seed }, or null without adapters.
  val lora_options() const {
    if (!m_->has_lora()) return val::null();
    const LoraOptions& o = m_->lora_options();
    val out = val::object();
    out.set("rank", o.rank);
    out.set("alpha", o.alpha);
    out.set("dropout", o.dropout);
    out.set("seed", static_cast<double>(o.seed));
    val targets = val::array();
    for (const std::string& t : o.targets) targets.call<void>("push", t);
    out.set("targets", targets);
    return out;
  }

 protected:
  // guarded() for calls on a model that may be on the GPU. When the GPU is lost (or its worker dies) in the
  // call, the model continues on the wasm core from its host copy (kept at creation, load and every
  // save({ withOptimizer })), and the error says so: the call is rejected, the model stays usable.
  template <class F>
  auto run(F&& f) -> decltype(f()) {
    return guarded([&]() -> decltype(f()) {
      try {
        return f();
      } catch (const qkv::Error& e) {
        if (m_->device() != Device::WebGPU || ops::webgpu_unavailable_reason().empty()) throw;
        std::unique_ptr<Model> cpu = Model::load(snapshot_);
        m_ = std::move(cpu);
        throw qkv::Error(std::string(e.what()) + "; the model continues on the wasm core from its state at step " +
                         std::to_string(m_->step()) + " (its last save({ withOptimizer: true }), load or creation)");
      }
    });
  }

  // What a trainStep resolves to: the loss, and whether the model skipped the update (NonFinite::Skip).
  val step_result(float loss) const {
    val out = val::object();
    out.set("loss", loss);
    out.set("skipped", m_->last_step_skipped());
    out.set("skippedSteps", m_->skipped_steps());
    return out;
  }

  std::unique_ptr<Model> m_;

 private:
  // The host copy of a model on the GPU: `bytes` when given (a checkpoint with its optimizer state), else
  // the model's own state read back now. Nothing for a model on the CPU.
  void keep(std::vector<uint8_t> bytes) {
    if (m_->device() == Device::CPU) return;
    snapshot_ = bytes.empty() ? m_->save(true, {}) : std::move(bytes);
  }
  std::vector<uint8_t> snapshot_;
};

// A checkpoint streamed in by the package (web/src/core.ts: load from a Response, Blob or stream): JS copies each
// chunk straight into buffer()'s view of the wasm heap and commits it; finish() gives the model binding T.
// Errors are left for takeError(): buffer() then gives undefined, commit() false, finish() null.
// L: the loader (a qkv checkpoint's, or a Hugging Face GPT-2's: PretrainedLoader, built from config.json's text).
template <class T, class L = CheckpointLoader<typename T::CoreModel>>
class JsLoader {
 public:
  // total: the file's size, or -1 when unknown.
  explicit JsLoader(double total) : l_(size_of(total)) {}
  // A pretrained GPT-2's (PretrainedLoader): config.json's text, and how its weights are held ("f32" or "keep").
  JsLoader(const std::string& config_json, double total, const std::string& weights)
      : l_(config_json, size_of(total), OptimizerConfig{}, pretrained_weights_from_string(weights, "options.weights")) {
  }
  // Any other constructor of L (a sharded PretrainedLoader's).
  template <class... A>
  explicit JsLoader(std::in_place_t, A&&... args) : l_(std::forward<A>(args)...) {}
  // A Uint8Array over the heap where up to `max` next bytes go (empty once the file is complete). Valid until the
  // next call into the core (the heap may grow).
  val buffer(double max) {
    return guarded([&] {
      std::span<uint8_t> to = l_.buffer();
      to = to.first(std::min(to.size(), static_cast<size_t>(std::max(0.0, max))));
      return val(emscripten::typed_memory_view(to.size(), to.data()));
    });
  }
  bool commit(double n) {
    return guarded([&] {
      l_.commit(static_cast<size_t>(n));
      return true;
    });
  }
  double received() const { return static_cast<double>(l_.received()); }
  T* finish() {
    return guarded([&] {
      std::unique_ptr<typename T::CoreModel> m = l_.finish();
      if (default_device() != Device::CPU) m->to(default_device());
      return new T(std::move(m));  // on the GPU, JsModel keeps its host copy (a save)
    });
  }

 private:
  static std::optional<uint64_t> size_of(double total) {
    return total >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(total)) : std::nullopt;
  }
  L l_;
};

// The Embind class of a model binding with what JsModel gives every kind; the caller adds the rest. Also
// registers its streaming loader, "<name>Loader".
template <class T>
emscripten::class_<T> model_class(const char* name) {
  static const std::string loader = std::string(name) + "Loader";
  emscripten::class_<JsLoader<T>>(loader.c_str())
      .template constructor<double>()
      .function("buffer", &JsLoader<T>::buffer)
      .function("commit", &JsLoader<T>::commit)
      .function("received", &JsLoader<T>::received)
      .function("finish", &JsLoader<T>::finish, emscripten::allow_raw_pointers());
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
          "setQuantActivations", +[](T& t, const std::string& a) { t.set_quant_activations(a); })
      .function(
          "setRecompute", +[](T& t, const std::string& mode) { t.set_recompute(mode); })
      .function(
          "recompute", +[](const T& t) { return t.recompute(); })
      .function(
          "numParameters", +[](const T& t) { return t.num_parameters(); })
      .function(
          "step", +[](const T& t) { return t.step(); })
      .function(
          "config", +[](const T& t) { return t.config(); })
      .function(
          "memory", +[](const T& t) { return t.memory(); })
      .function(
          "quantize", +[](T& t, val options) { t.quantize(options); })
      .function(
          "weightFormats", +[](const T& t) { return t.weight_formats(); })
      .function(
          "addLora", +[](T& t, val options) { t.add_lora(options); })
      .function(
          "mergeLora", +[](T& t) { t.merge_lora(); })
      .function(
          "removeLora", +[](T& t) { t.remove_lora(); })
      .function(
          "loraOptions", +[](const T& t) { return t.lora_options(); })
      .function(
          "saveAdapter", +[](T& t, std::string names) { return t.save_adapter(names); })
      .function(
          "loadAdapter",
          +[](T& t, std::string config, val safetensors) { t.load_adapter(std::move(config), safetensors); });
  return c;
}

}  // namespace qkv::js
