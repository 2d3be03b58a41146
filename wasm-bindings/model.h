#pragma once
// What every model's binding shares (JsModel) and the Embind class that binds it (model_class); each model
// kind's file adds its own calls.
#include <memory>

#include "config.h"
#include "convert.h"

namespace qkv::js {

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

}  // namespace qkv::js
