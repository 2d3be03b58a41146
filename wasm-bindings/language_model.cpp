// LanguageModel and its Generation (one token per next()) for JS.
#include "qkv/language_model.h"

#include "model.h"
#include "qkv/import.h"
#include "qkv/pretrained_loader.h"

namespace qkv::js {
namespace {

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

  // A Hugging Face GPT-2: config.json's text and model.safetensors' bytes (qkv/import.h, load_pretrained).
  static JsLanguageModel* import_pretrained(std::string config, val weights) {
    return guarded([&] {
      return new JsLanguageModel(qkv::load_pretrained(config, uint8_array(weights, "weights"), {}, default_device()));
    });
  }

  val train_step(val inputs, val targets, int batch, int seq) {
    return run([&] {
      return step_result(m_->train_step(int32_array(inputs, "inputs"), int32_array(targets, "targets"), batch, seq));
    });
  }
  val evaluate(val inputs, val targets, int batch, int seq) {
    return run([&] {
      return to_js(m_->evaluate(int32_array(inputs, "inputs"), int32_array(targets, "targets"), batch, seq));
    });
  }
  val logits(val inputs, int batch, int seq) {
    return run([&] { return to_js(m_->logits(int32_array(inputs, "inputs"), batch, seq)); });
  }
  val attention(int layer) const {
    return guarded([&] { return to_js(m_->attention(layer)); });
  }
  val generate(val prompt, val options) {
    return run([&] {
      const auto p = int32_array(prompt, "prompt");
      return to_js(m_->generate(p, sampling_options(options)));
    });
  }
  // nullptr (JS null) on error, with the error left for takeError().
  JsGeneration* start_generation(val prompt, val options) {
    return run([&] {
      const auto p = int32_array(prompt, "prompt");
      return new JsGeneration(m_->start_generation(p, sampling_options(options)));
    });
  }
};

}  // namespace
}  // namespace qkv::js

using namespace qkv::js;

EMSCRIPTEN_BINDINGS(qkv_language_model) {
  using emscripten::allow_raw_pointers;
  // A Hugging Face GPT-2's model.safetensors streamed in chunks (qkv/pretrained_loader.h), as LanguageModelLoader
  // streams a checkpoint: PretrainedLoader.open(configJsonText, total, weights); sharded weights with
  // PretrainedLoader.openSharded(configJsonText, indexJsonText, [{ file, head }, ...], weights) (each shard's name and
  // first bytes, in the order their files will stream); weights: "f32" or "keep" (qkv/import.h PretrainedWeights).
  using Pretrained = JsLoader<JsLanguageModel, qkv::PretrainedLoader>;
  emscripten::class_<Pretrained>("PretrainedLoader")
      // A factory rather than a constructor: config.json's refusal goes to takeError() (null), never through wasm.
      .class_function(
          "open",
          +[](std::string config, double total, std::string weights) {
            return guarded([&] { return new Pretrained(config, total, weights); });
          },
          allow_raw_pointers())
      .class_function(
          "openSharded",
          +[](std::string config, std::string index, val shards, std::string weights) {
            return guarded([&] {
              std::vector<qkv::PretrainedShard> heads;
              const size_t n = shards["length"].as<size_t>();
              for (size_t i = 0; i < n; ++i) {
                const val s = shards[i];
                heads.push_back({s["file"].as<std::string>(), uint8_array(s["head"], "head")});
              }
              return new Pretrained(std::in_place, config, index, std::move(heads), qkv::OptimizerConfig{},
                                    qkv::pretrained_weights_from_string(weights, "options.weights"));
            });
          },
          allow_raw_pointers())
      .function("buffer", &Pretrained::buffer)
      .function("commit", &Pretrained::commit)
      .function("received", &Pretrained::received)
      .function("finish", &Pretrained::finish, allow_raw_pointers());
  model_class<JsLanguageModel>("LanguageModel")
      .class_function("importPretrained", &JsLanguageModel::import_pretrained, allow_raw_pointers())
      .function("trainStep", &JsLanguageModel::train_step)
      .function("evaluate", &JsLanguageModel::evaluate)
      .function("logits", &JsLanguageModel::logits)
      .function("attention", &JsLanguageModel::attention)
      .function("generate", &JsLanguageModel::generate)
      .function("startGeneration", &JsLanguageModel::start_generation, allow_raw_pointers());

  emscripten::class_<JsGeneration>("Generation").function("next", &JsGeneration::next);
}
