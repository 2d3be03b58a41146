// Embind glue: converts JS values to the public C++ API's types and back, and turns a C++ exception into
// a JS Error carrying its message. No math and no validation of its own beyond JS types (the core
// validates values, so native users get the same checks).
#include <emscripten.h>
#include <emscripten/bind.h>
#include <emscripten/val.h>

#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "qkv/qkv.h"

using emscripten::val;

namespace {

// Runs f; a C++ exception becomes a thrown JS Error. The message is copied out and the C++ exception
// finished before the JS throw, which then unwinds only frames that hold nothing to free.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  static std::string message;
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      return;
    } else {
      return f();
    }
  } catch (const std::bad_alloc&) {
    message = "out of memory: the wasm heap could not grow (it is limited to 4 GiB)";
  } catch (const std::exception& e) {
    message = e.what();
  }
  EM_ASM({ throw new Error(UTF8ToString($0)); }, message.c_str());
  __builtin_unreachable();
}

[[noreturn]] void throw_type_error(const std::string& message) {
  EM_ASM({ throw new TypeError(UTF8ToString($0)); }, message.c_str());
  __builtin_unreachable();
}

std::string type_of(const val& v) { return v.typeOf().as<std::string>(); }

// A JS number field of `config` into *out; undefined keeps the C++ default.
template <class T>
void read_number(const val& config, const char* key, T* out) {
  const val v = config[key];
  if (v.isUndefined()) return;
  if (!v.isNumber()) throw_type_error(std::string("config.") + key + " must be a number, got " + type_of(v));
  const double d = v.as<double>();
  if constexpr (std::is_integral_v<T>) {
    if (!std::isfinite(d) || d != std::floor(d) || std::abs(d) > 2147483647.0)
      throw_type_error(std::string("config.") + key + " = " + std::to_string(d) + " must be an integer");
  }
  *out = static_cast<T>(d);
}

std::vector<int32_t> int32_array(const val& v, const char* name) {
  if (!v.instanceof (val::global("Int32Array")))
    throw_type_error(std::string(name) + " must be an Int32Array, got " + type_of(v));
  return emscripten::convertJSArrayToNumberVector<int32_t>(v);
}

class JsLanguageModel {
 public:
  explicit JsLanguageModel(std::unique_ptr<qkv::LanguageModel> lm) : lm_(std::move(lm)) {}

  static JsLanguageModel* create(val config) {
    if (type_of(config) != "object" || config.isNull())
      throw_type_error("config must be an object, got " + type_of(config));
    qkv::LanguageModelConfig c;
    qkv::OptimizerConfig o;
    read_number(config, "vocabSize", &c.vocab_size);
    read_number(config, "context", &c.context);
    read_number(config, "dModel", &c.d_model);
    read_number(config, "heads", &c.heads);
    read_number(config, "layers", &c.layers);
    read_number(config, "dFF", &c.d_ff);
    double seed = static_cast<double>(c.seed);
    read_number(config, "seed", &seed);
    c.seed = static_cast<uint64_t>(seed);
    read_number(config, "lr", &o.lr);
    read_number(config, "beta1", &o.beta1);
    read_number(config, "beta2", &o.beta2);
    read_number(config, "eps", &o.eps);
    read_number(config, "weightDecay", &o.weight_decay);
    read_number(config, "gradClip", &o.grad_clip);
    auto lm = guarded([&] { return std::make_unique<qkv::LanguageModel>(c, o); });
    return new JsLanguageModel(std::move(lm));
  }

  float train_step(val inputs, val targets, int batch, int seq) {
    const auto in = int32_array(inputs, "inputs"), tg = int32_array(targets, "targets");
    return guarded([&] { return lm_->train_step(in, tg, batch, seq); });
  }

  float evaluate(val inputs, val targets, int batch, int seq) {
    const auto in = int32_array(inputs, "inputs"), tg = int32_array(targets, "targets");
    return guarded([&] { return static_cast<float>(lm_->evaluate(in, tg, batch, seq).loss); });
  }

  val generate(val prompt, int max_tokens, float temperature, double seed) {
    const auto p = int32_array(prompt, "prompt");
    const auto out = guarded([&] { return lm_->generate(p, max_tokens, temperature, static_cast<uint64_t>(seed)); });
    return val(emscripten::typed_memory_view(out.size(), out.data())).call<val>("slice");
  }

  void set_learning_rate(float lr) {
    guarded([&] { lm_->set_learning_rate(lr); });
  }
  double num_parameters() const { return static_cast<double>(lm_->num_parameters()); }
  int step() const { return lm_->step(); }

 private:
  std::unique_ptr<qkv::LanguageModel> lm_;
};

std::string version() { return qkv::version(); }
std::string simd() { return qkv::active_isa(); }
bool threaded() { return qkv::threaded_build(); }
int max_threads() { return qkv::max_threads(); }
int num_threads() { return qkv::num_threads(); }
void set_threads(int n) {
  guarded([&] { qkv::set_num_threads(n); });
}

}  // namespace

EMSCRIPTEN_BINDINGS(qkv) {
  emscripten::function("version", &version);
  emscripten::function("simd", &simd);
  emscripten::function("threaded", &threaded);
  emscripten::function("maxThreads", &max_threads);
  emscripten::function("numThreads", &num_threads);
  emscripten::function("setThreads", &set_threads);
  emscripten::class_<JsLanguageModel>("LanguageModel")
      .constructor(&JsLanguageModel::create, emscripten::allow_raw_pointers())
      .function("trainStep", &JsLanguageModel::train_step)
      .function("evaluate", &JsLanguageModel::evaluate)
      .function("generate", &JsLanguageModel::generate)
      .function("setLearningRate", &JsLanguageModel::set_learning_rate)
      .function("numParameters", &JsLanguageModel::num_parameters)
      .function("step", &JsLanguageModel::step);
}
