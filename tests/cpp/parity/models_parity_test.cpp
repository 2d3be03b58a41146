// The three models against PyTorch (tests/fixtures): logits to 1e-5, every parameter's gradient to 1e-4,
// and the 50-step loss trajectory (same init, same batch, no dropout) within 1e-4 relative at every step.
// Each case runs on the CPU (ParityModels) and, with the same tolerances, on CUDA (ParityModelsCuda: skipped
// without a GPU). On CUDA the weights are loaded on the CPU and the model moved with to(), and it comes back
// with to(Device::CPU) for the gradients to be read: the path a user's checkpoint takes.
#include "parity/fixture_configs.h"
#include "parity/parity_util.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::models_parity_test {
namespace {

constexpr double kOutputTol = 1e-5, kGradTol = 1e-4, kLossTol = 1e-4;

std::vector<double> losses_of(const SafetensorsFile& f) {
  return test::meta_json(f, "losses").get<std::vector<double>>();
}

void expect_trajectory(const std::vector<double>& want, const std::function<float()>& step) {
  for (size_t s = 0; s < want.size(); ++s) {
    const double got = step();
    ASSERT_LE(std::abs(got - want[s]) / std::abs(want[s]), kLossTol)
        << "step " << s << ": qkv " << got << ", PyTorch " << want[s];
  }
}

// Model parity in three parts: logits, loss and gradients at the stored weights; then a fresh model from
// the same weights follows PyTorch's 50 optimizer steps.
template <class Model, class Config, class Logits, class ForwardBackward, class Step>
void run_model_case(Device device, const std::string& name, const Config& config, Logits logits, ForwardBackward fb,
                    Step step) {
  SCOPED_TRACE(name + (device == Device::CUDA ? " on cuda" : " on cpu"));
  const auto f = test::fixture(name);
  const OptimizerConfig opt = test::optimizer_of(f);
  {
    Model m(config, opt);
    test::load_params(m.parameters(), f);
    m.to(device);
    test::expect_close("output.logits", logits(m, f), f.floats("output.logits"), kOutputTol);
    const float loss = fb(m, f);
    const double want = std::stod(f.metadata.at("loss"));
    EXPECT_LE(std::abs(loss - want) / std::abs(want), kOutputTol) << "loss: qkv " << loss << ", PyTorch " << want;
    m.to(Device::CPU);
    test::expect_grads(m.parameters(), f, kGradTol);
  }
  Model m(config, opt);
  test::load_params(m.parameters(), f);
  m.to(device);
  expect_trajectory(losses_of(f), [&] { return step(m, f); });
}

// Each case as a function of the device, and its two tests.
#define QKV_PARITY_CASE(name)                     \
  void name(Device device);                       \
  TEST(ParityModels, name) { name(Device::CPU); } \
  TEST(ParityModelsCuda, name) {                  \
    QKV_SKIP_WITHOUT_CUDA();                      \
    name(Device::CUDA);                           \
  }                                               \
  void name(Device device)

// A pre-LN decoder-only model (learned positions, tied head): lm_gpt with the exact GELU, lm_gpt_tanh with its
// tanh approximation (GPT-2's gelu_new).
void run_lm_case(Device device, const std::string& name, Activation activation) {
  const LanguageModelConfig c = test::lm_gpt_config(activation);
  const auto shape = [](const SafetensorsFile& f) { return f.at("input.ids").shape; };
  run_model_case<LanguageModel>(
      device, name, c,
      [&](LanguageModel& m, const SafetensorsFile& f) {
        return m.logits(test::ids(f, "input.ids"), int(shape(f)[0]), int(shape(f)[1]));
      },
      [&](LanguageModel& m, const SafetensorsFile& f) {
        return m.forward_backward(test::ids(f, "input.ids"), test::ids(f, "input.targets"), int(shape(f)[0]),
                                  int(shape(f)[1]));
      },
      [&](LanguageModel& m, const SafetensorsFile& f) {
        return m.train_step(test::ids(f, "input.ids"), test::ids(f, "input.targets"), int(shape(f)[0]),
                            int(shape(f)[1]));
      });
}

QKV_PARITY_CASE(LanguageModelGptStyle) { run_lm_case(device, "lm_gpt", Activation::GELU); }
QKV_PARITY_CASE(LanguageModelGptStyleTanhGelu) { run_lm_case(device, "lm_gpt_tanh", Activation::GELUTanh); }

QKV_PARITY_CASE(Seq2SeqTranslationTutorial) {
  const Seq2SeqConfig c = test::seq2seq_tutorial_config();
  struct Batch {
    std::vector<int32_t> src, in, out;
    int B, S, T;
  };
  const auto batch = [](const SafetensorsFile& f) {
    return Batch{test::ids(f, "input.src"),       test::ids(f, "input.tgt_in"),    test::ids(f, "input.tgt_out"),
                 int(f.at("input.src").shape[0]), int(f.at("input.src").shape[1]), int(f.at("input.tgt_in").shape[1])};
  };
  run_model_case<Seq2Seq>(
      device, "seq2seq", c,
      [&](Seq2Seq& m, const SafetensorsFile& f) {
        const Batch b = batch(f);
        return m.logits(b.src, b.in, b.B, b.S, b.T);
      },
      [&](Seq2Seq& m, const SafetensorsFile& f) {
        const Batch b = batch(f);
        return m.forward_backward(b.src, b.in, b.out, b.B, b.S, b.T);
      },
      [&](Seq2Seq& m, const SafetensorsFile& f) {
        const Batch b = batch(f);
        return m.train_step(b.src, b.in, b.out, b.B, b.S, b.T);
      });
}

void run_classifier_case(Device device, const std::string& name, const ClassifierConfig& c) {
  const auto shape = [](const SafetensorsFile& f) { return f.at("input.ids").shape; };
  run_model_case<Classifier>(
      device, name, c,
      [&](Classifier& m, const SafetensorsFile& f) {
        return m.logits(test::ids(f, "input.ids"), int(shape(f)[0]), int(shape(f)[1]));
      },
      [&](Classifier& m, const SafetensorsFile& f) {
        return m.forward_backward(test::ids(f, "input.ids"), test::ids(f, "input.labels"), int(shape(f)[0]),
                                  int(shape(f)[1]));
      },
      [&](Classifier& m, const SafetensorsFile& f) {
        return m.train_step(test::ids(f, "input.ids"), test::ids(f, "input.labels"), int(shape(f)[0]),
                            int(shape(f)[1]));
      });
}

QKV_PARITY_CASE(ClassifierFirstTokenMlpHeadPostLn) {
  ClassifierConfig c{.vocab_size = 20, .context = 12, .d_model = 16, .heads = 4, .layers = 2, .d_ff = 32, .classes = 3};
  c.activation = Activation::ReLU;
  c.norm = NormPosition::Post;
  c.positions = Positions::Sinusoidal;
  c.scale_embedding = true;
  c.pooling = Pooling::First;
  c.head = ClassifierHead::MLP;
  run_classifier_case(device, "classifier_first_mlp", c);
}

QKV_PARITY_CASE(ClassifierMeanPoolLinearHeadPreLn) {
  run_classifier_case(device, "classifier_mean_linear", test::classifier_mean_linear_config());
}

}  // namespace
}  // namespace qkv::models_parity_test
