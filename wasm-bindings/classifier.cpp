// Classifier for JS.
#include "qkv/classifier.h"

#include "model.h"

namespace qkv::js {
namespace {

class JsClassifier : public JsModel<JsClassifier, qkv::Classifier, qkv::ClassifierConfig> {
 public:
  static constexpr const char* kName = "Classifier";
  using JsModel::JsModel;

  val train_step(val tokens, val labels, int batch, int seq) {
    return run([&] {
      return step_result(m_->train_step(int32_array(tokens, "tokens"), int32_array(labels, "labels"), batch, seq));
    });
  }
  val evaluate(val tokens, val labels, int batch, int seq) {
    return run(
        [&] { return to_js(m_->evaluate(int32_array(tokens, "tokens"), int32_array(labels, "labels"), batch, seq)); });
  }
  val logits(val tokens, int batch, int seq) {
    return run([&] { return to_js(m_->logits(int32_array(tokens, "tokens"), batch, seq)); });
  }
  val attention(int layer) const {
    return guarded([&] { return to_js(m_->attention(layer)); });
  }
};

}  // namespace
}  // namespace qkv::js

using namespace qkv::js;

EMSCRIPTEN_BINDINGS(qkv_classifier) {
  model_class<JsClassifier>("Classifier")
      .function("trainStep", &JsClassifier::train_step)
      .function("evaluate", &JsClassifier::evaluate)
      .function("logits", &JsClassifier::logits)
      .function("attention", &JsClassifier::attention);
}
