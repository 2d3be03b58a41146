// LoRA adapters against PyTorch (tests/fixtures/make_lora_fixtures.py: PEFT's formula, y = x W^T + b +
// (alpha / r) dropout(x) A^T B^T, on the frozen bases of the model fixtures lm_gpt, seq2seq and
// classifier_mean_linear), for the three model kinds:
// - Forward: at fixed nonzero adapters (lora.*), the logits within 1e-5 and every adapter's gradient within 1e-4
//   (relative to the tensor's largest value, as every parity test); without dropout and with it, where the
//   reference drew qkv's masks (qkv/lora.h: adapter i's stream in the pass's seed).
// - FiniteDifferences: the same gradients against central differences of qkv's own loss.
// - Trajectory: from the real init (A as stored in init.*, B = 0) the 50 AdamW losses within 1e-4 relative at every
//   step (base frozen, clipping over the adapters alone), and the adapters after them (final.*) within 1e-4, read
//   from the model and from the adapter file save_adapter writes (names, shapes, values).
// - Merged: merge_lora's model against the same logits (not the language model: its head adapter sits on the tied
//   embedding, which merge_lora refuses).
// - Int8Base*: Forward and Trajectory on a base quantized to int8 (Model::quantize), against the reference on the
//   dequantized weights (the script reproduces qkv's int8 rounding).
// Each runs on the CPU (LoraParity) and, with the same tolerances, on CUDA (LoraParityCuda: skipped without a GPU).
#include <map>

#include "parity/fixture_configs.h"
#include "parity/parity_util.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/lora.h"
#include "qkv/lora_files.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::lora_parity_test {
namespace {

constexpr double kOutputTol = 1e-5, kGradTol = 1e-4, kLossTol = 1e-4, kFinalTol = 1e-4;

// One model kind: how to build it on its base fixture's config and run it on that fixture's batch.
struct Kind {
  std::string lora_fixture, base_fixture;
  std::function<std::unique_ptr<Model>(const OptimizerConfig&)> make;
  std::function<std::vector<float>(Model&, const SafetensorsFile&)> logits;
  std::function<float(Model&, const SafetensorsFile&)> forward_backward, train_step;
};

int dim(const SafetensorsFile& f, const std::string& name, int i) { return int(f.at(name).shape[i]); }

Kind language_model() {
  Kind k{"lora_lm_gpt", "lm_gpt", {}, {}, {}, {}};
  k.make = [](const OptimizerConfig& o) -> std::unique_ptr<Model> {
    return std::make_unique<LanguageModel>(test::lm_gpt_config(), o);
  };
  const auto lm = [](Model& m) -> LanguageModel& { return dynamic_cast<LanguageModel&>(m); };
  k.logits = [lm](Model& m, const SafetensorsFile& f) {
    return lm(m).logits(test::ids(f, "input.ids"), dim(f, "input.ids", 0), dim(f, "input.ids", 1));
  };
  k.forward_backward = [lm](Model& m, const SafetensorsFile& f) {
    return lm(m).forward_backward(test::ids(f, "input.ids"), test::ids(f, "input.targets"), dim(f, "input.ids", 0),
                                  dim(f, "input.ids", 1));
  };
  k.train_step = [lm](Model& m, const SafetensorsFile& f) {
    return lm(m).train_step(test::ids(f, "input.ids"), test::ids(f, "input.targets"), dim(f, "input.ids", 0),
                            dim(f, "input.ids", 1));
  };
  return k;
}

Kind seq2seq() {
  Kind k{"lora_seq2seq", "seq2seq", {}, {}, {}, {}};
  k.make = [](const OptimizerConfig& o) -> std::unique_ptr<Model> {
    return std::make_unique<Seq2Seq>(test::seq2seq_tutorial_config(), o);
  };
  const auto s2s = [](Model& m) -> Seq2Seq& { return dynamic_cast<Seq2Seq&>(m); };
  const auto B = [](const SafetensorsFile& f) { return dim(f, "input.src", 0); };
  const auto S = [](const SafetensorsFile& f) { return dim(f, "input.src", 1); };
  const auto T = [](const SafetensorsFile& f) { return dim(f, "input.tgt_in", 1); };
  k.logits = [=](Model& m, const SafetensorsFile& f) {
    return s2s(m).logits(test::ids(f, "input.src"), test::ids(f, "input.tgt_in"), B(f), S(f), T(f));
  };
  k.forward_backward = [=](Model& m, const SafetensorsFile& f) {
    return s2s(m).forward_backward(test::ids(f, "input.src"), test::ids(f, "input.tgt_in"),
                                   test::ids(f, "input.tgt_out"), B(f), S(f), T(f));
  };
  k.train_step = [=](Model& m, const SafetensorsFile& f) {
    return s2s(m).train_step(test::ids(f, "input.src"), test::ids(f, "input.tgt_in"), test::ids(f, "input.tgt_out"),
                             B(f), S(f), T(f));
  };
  return k;
}

// The fused in-projection adapter ("qkv") on every attention, seq2seq's cross-attention included: B's rows 0..C on
// the decoder's queries, C..3C on the memory, each input with its own mask from the adapter's stream.
Kind seq2seq_fused() {
  Kind k = seq2seq();
  k.lora_fixture = "lora_seq2seq_fused";
  return k;
}

Kind classifier() {
  Kind k{"lora_classifier", "classifier_mean_linear", {}, {}, {}, {}};
  k.make = [](const OptimizerConfig& o) -> std::unique_ptr<Model> {
    return std::make_unique<Classifier>(test::classifier_mean_linear_config(), o);
  };
  const auto cls = [](Model& m) -> Classifier& { return dynamic_cast<Classifier&>(m); };
  k.logits = [cls](Model& m, const SafetensorsFile& f) {
    return cls(m).logits(test::ids(f, "input.ids"), dim(f, "input.ids", 0), dim(f, "input.ids", 1));
  };
  k.forward_backward = [cls](Model& m, const SafetensorsFile& f) {
    return cls(m).forward_backward(test::ids(f, "input.ids"), test::ids(f, "input.labels"), dim(f, "input.ids", 0),
                                   dim(f, "input.ids", 1));
  };
  k.train_step = [cls](Model& m, const SafetensorsFile& f) {
    return cls(m).train_step(test::ids(f, "input.ids"), test::ids(f, "input.labels"), dim(f, "input.ids", 0),
                             dim(f, "input.ids", 1));
  };
  return k;
}

// The fixtures of one case: the base (weights, batch) and what LoRA adds.
struct Case {
  Kind kind;
  SafetensorsFile base, lora;

  explicit Case(Kind k)
      : kind(std::move(k)), base(test::fixture(kind.base_fixture)), lora(test::fixture(kind.lora_fixture)) {}

  // tag "" (no dropout), "dropout." (the fixture's dropout, the same adapters otherwise) or "int8." (no dropout, the
  // base quantized to int8: the reference's base weights are the dequantized values).
  LoraOptions options(const std::string& tag) const {
    return lora_options_from_string(lora.metadata.at(tag == "dropout." ? "lora_dropout" : "lora"));
  }

  // A model on the base fixture's weights with adapters added (their values still qkv's init).
  std::unique_ptr<Model> model(const std::string& tag) const {
    auto m = kind.make(test::optimizer_of(lora));
    test::load_params(m->parameters(), base);
    if (tag == "int8.") m->quantize(WeightFormat::Int8);
    m->add_lora(options(tag));
    return m;
  }

  // The fixture's adapter names in lora_parameters() order: per adapter A then B.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& stem : test::meta_json(lora, "adapters").get<std::vector<std::string>>()) {
      out.push_back(stem + ".lora_A.weight");
      out.push_back(stem + ".lora_B.weight");
    }
    return out;
  }

  // Checks that the model's adapters are the fixture's (names in order, shapes), then sets their values from
  // "<prefix><name>". The order matters beyond naming: adapter i draws its dropout masks from stream i.
  void set_adapters(Model& m, const std::string& prefix) const {
    auto views = m.lora_parameters();
    const auto want = names();
    ASSERT_EQ(views.size(), want.size()) << "the model and the fixture have different adapters";
    for (size_t i = 0; i < views.size(); ++i) {
      ASSERT_EQ(std::string(views[i].name), want[i]) << "adapter tensor " << i;
      const auto& t = lora.at(prefix + want[i]);
      ASSERT_EQ(std::vector<int64_t>(views[i].shape.begin(), views[i].shape.end()), t.shape) << want[i];
      const auto v = lora.floats(prefix + want[i]);
      std::copy(v.begin(), v.end(), views[i].value.begin());
    }
  }
};

// Logits, loss and every adapter gradient at fixed nonzero adapters. With dropout the logits are not compared
// (logits() is an inference call: no dropout); the loss and gradients are those of the first training pass. The
// adapters are set on the CPU, and on CUDA the model comes back with to(Device::CPU) for the gradients to be read.
void check_forward(Device device, const Kind& kind, const std::string& tag) {
  SCOPED_TRACE(kind.lora_fixture + " " + tag + (device == Device::CUDA ? " on cuda" : " on cpu"));
  const Case c(kind);
  auto m = c.model(tag);
  ASSERT_NO_FATAL_FAILURE(c.set_adapters(*m, "lora."));
  m->to(device);
  if (tag != "dropout.")
    test::expect_close(tag + "output.logits", kind.logits(*m, c.base), c.lora.floats(tag + "output.logits"),
                       kOutputTol);
  // A fresh model for the training pass: its dropout pass counter must start where the reference's does (1).
  m = c.model(tag);
  ASSERT_NO_FATAL_FAILURE(c.set_adapters(*m, "lora."));
  m->to(device);
  const float loss = kind.forward_backward(*m, c.base);
  const double want = std::stod(c.lora.metadata.at(tag + "loss"));
  EXPECT_LE(std::abs(loss - want) / std::abs(want), kOutputTol) << "loss: qkv " << loss << ", PyTorch " << want;
  m->to(Device::CPU);
  for (auto& p : m->lora_parameters())
    test::expect_close(tag + "grad." + p.name, {p.grad.begin(), p.grad.end()}, c.lora.floats(tag + "grad." + p.name),
                       kGradTol);
}

// merge_lora folds scale B A into the base weights: the merged model (no adapters left) gives the adapters' logits,
// which the script checked against the base's torch.nn model with the folded weights (1e-9).
void check_merged(const Kind& kind) {
  SCOPED_TRACE(kind.lora_fixture + " merged");
  const Case c(kind);
  auto m = c.model("");
  ASSERT_NO_FATAL_FAILURE(c.set_adapters(*m, "lora."));
  m->merge_lora();
  EXPECT_FALSE(m->has_lora());
  test::expect_close("output.logits", kind.logits(*m, c.base), c.lora.floats("output.logits"), kOutputTol);
}

// qkv's adapter gradients against central differences of its own loss (float32, as nn/gradcheck_test.cpp: the
// tolerance is far below what a wrong term gives), at a few spread coordinates of every adapter tensor.
void check_finite_differences(const Kind& kind, float h) {
  SCOPED_TRACE(kind.lora_fixture);
  const Case c(kind);
  auto m = c.model("");
  ASSERT_NO_FATAL_FAILURE(c.set_adapters(*m, "lora."));
  kind.forward_backward(*m, c.base);
  std::map<std::string, std::vector<float>> analytic;
  for (auto& p : m->lora_parameters()) analytic[p.name] = {p.grad.begin(), p.grad.end()};
  const auto loss = [&] { return static_cast<double>(kind.forward_backward(*m, c.base)); };
  for (auto& p : m->lora_parameters()) {
    const auto& g = analytic[p.name];
    double max_abs = 0;
    for (float x : g) max_abs = std::max(max_abs, std::abs(static_cast<double>(x)));
    const size_t n = g.size();
    for (size_t s = 0; s < 4; ++s) {
      const size_t i = (s * 7919 + 13) % n;
      const float orig = p.value[i];
      p.value[i] = orig + h;
      const double lp = loss();
      p.value[i] = orig - h;
      const double lm = loss();
      p.value[i] = orig;
      const double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 2e-4 + 1e-2 * std::max(std::abs(fd), 0.1 * max_abs))
          << p.name << "[" << i << "]: analytic vs finite difference";
    }
  }
}

// The adapter file after the steps (qkv/lora_files.h, PEFT's layout in qkv's module names) holds the reference's
// adapters: every name "base_model.model.<fixture name>", nothing else, the same shapes, the values of final.*; its
// config the options' rank, alpha and dropout.
void check_saved_adapter(Model& m, const Case& c, const std::string& tag) {
  const AdapterFiles files = save_adapter(m, AdapterNames::Qkv);
  const SafetensorsFile saved = parse_safetensors(files.safetensors);
  const auto names = c.names();
  ASSERT_EQ(saved.tensors.size(), names.size()) << "adapter_model.safetensors: tensor count";
  for (const auto& name : names) {
    const std::string key = "base_model.model." + name;
    ASSERT_TRUE(saved.contains(key)) << "adapter_model.safetensors has no " << key;
    EXPECT_EQ(saved.at(key).shape, c.lora.at(tag + "final." + name).shape) << key;
    test::expect_close("saved " + key, saved.floats(key), c.lora.floats(tag + "final." + name), kFinalTol);
  }
  const auto config = nlohmann::json::parse(files.config_json);
  const LoraOptions o = c.options(tag);
  EXPECT_EQ(config.at("r").get<int>(), o.rank);
  EXPECT_EQ(config.at("lora_alpha").get<float>(), o.alpha);
  EXPECT_EQ(config.at("lora_dropout").get<float>(), o.dropout);
}

// 50 steps from the real init: add_lora gives B = 0 and A within PEFT's bound; A is then set to the reference's draw.
void check_trajectory(Device device, const Kind& kind, const std::string& tag) {
  SCOPED_TRACE(kind.lora_fixture + " " + tag + (device == Device::CUDA ? " on cuda" : " on cpu"));
  const Case c(kind);
  auto m = c.model(tag);
  for (auto& p : m->lora_parameters()) {
    const bool is_b = std::string(p.name).find(".lora_B.") != std::string::npos;
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape[1]));  // A (r, in): U(-1/sqrt(in), 1/sqrt(in))
    for (float v : p.value) {
      if (is_b)
        ASSERT_EQ(v, 0.f) << p.name << ": B starts at 0";
      else
        ASSERT_LE(std::abs(v), bound) << p.name << ": A outside PEFT's Kaiming-uniform bound";
    }
  }
  ASSERT_NO_FATAL_FAILURE(c.set_adapters(*m, "init."));
  m->to(device);
  const auto want = test::meta_json(c.lora, tag + "losses").get<std::vector<double>>();
  for (size_t s = 0; s < want.size(); ++s) {
    const double got = kind.train_step(*m, c.base);
    ASSERT_LE(std::abs(got - want[s]) / std::abs(want[s]), kLossTol)
        << "step " << s << ": qkv " << got << ", PyTorch " << want[s];
  }
  EXPECT_EQ(m->step(), static_cast<int>(want.size()));
  m->to(Device::CPU);
  for (auto& p : m->lora_parameters())
    test::expect_close(tag + "final." + p.name, {p.value.begin(), p.value.end()},
                       c.lora.floats(tag + "final." + p.name), kFinalTol);
  check_saved_adapter(*m, c, tag);
}

// Each check as a CPU test (LoraParity) and a CUDA one (LoraParityCuda: skipped without a GPU).
#define QKV_LORA_CASE(name, ...)                       \
  TEST(LoraParity, name) { __VA_ARGS__(Device::CPU); } \
  TEST(LoraParityCuda, name) {                         \
    QKV_SKIP_WITHOUT_CUDA();                           \
    __VA_ARGS__(Device::CUDA);                         \
  }

QKV_LORA_CASE(LanguageModelForward, [](Device d) { check_forward(d, language_model(), ""); })
QKV_LORA_CASE(LanguageModelForwardDropout, [](Device d) { check_forward(d, language_model(), "dropout."); })
QKV_LORA_CASE(LanguageModelTrajectory, [](Device d) { check_trajectory(d, language_model(), ""); })
QKV_LORA_CASE(LanguageModelTrajectoryDropout, [](Device d) { check_trajectory(d, language_model(), "dropout."); })
QKV_LORA_CASE(LanguageModelInt8BaseForward, [](Device d) { check_forward(d, language_model(), "int8."); })
QKV_LORA_CASE(LanguageModelInt8BaseTrajectory, [](Device d) { check_trajectory(d, language_model(), "int8."); })
TEST(LoraParity, LanguageModelFiniteDifferences) { check_finite_differences(language_model(), 1e-2f); }

QKV_LORA_CASE(Seq2SeqForward, [](Device d) { check_forward(d, seq2seq(), ""); })
QKV_LORA_CASE(Seq2SeqForwardDropout, [](Device d) { check_forward(d, seq2seq(), "dropout."); })
QKV_LORA_CASE(Seq2SeqTrajectory, [](Device d) { check_trajectory(d, seq2seq(), ""); })
QKV_LORA_CASE(Seq2SeqTrajectoryDropout, [](Device d) { check_trajectory(d, seq2seq(), "dropout."); })
QKV_LORA_CASE(Seq2SeqInt8BaseForward, [](Device d) { check_forward(d, seq2seq(), "int8."); })
QKV_LORA_CASE(Seq2SeqInt8BaseTrajectory, [](Device d) { check_trajectory(d, seq2seq(), "int8."); })
// ReLU: a smaller step straddles fewer kinks (nn/gradcheck_test.cpp).
TEST(LoraParity, Seq2SeqFiniteDifferences) { check_finite_differences(seq2seq(), 1e-3f); }
TEST(LoraParity, Seq2SeqMerged) { check_merged(seq2seq()); }

QKV_LORA_CASE(Seq2SeqFusedForward, [](Device d) { check_forward(d, seq2seq_fused(), ""); })
QKV_LORA_CASE(Seq2SeqFusedForwardDropout, [](Device d) { check_forward(d, seq2seq_fused(), "dropout."); })
QKV_LORA_CASE(Seq2SeqFusedTrajectory, [](Device d) { check_trajectory(d, seq2seq_fused(), ""); })
QKV_LORA_CASE(Seq2SeqFusedTrajectoryDropout, [](Device d) { check_trajectory(d, seq2seq_fused(), "dropout."); })
TEST(LoraParity, Seq2SeqFusedFiniteDifferences) { check_finite_differences(seq2seq_fused(), 1e-3f); }
TEST(LoraParity, Seq2SeqFusedMerged) { check_merged(seq2seq_fused()); }

QKV_LORA_CASE(ClassifierForward, [](Device d) { check_forward(d, classifier(), ""); })
QKV_LORA_CASE(ClassifierForwardDropout, [](Device d) { check_forward(d, classifier(), "dropout."); })
QKV_LORA_CASE(ClassifierTrajectory, [](Device d) { check_trajectory(d, classifier(), ""); })
QKV_LORA_CASE(ClassifierTrajectoryDropout, [](Device d) { check_trajectory(d, classifier(), "dropout."); })
QKV_LORA_CASE(ClassifierInt8BaseForward, [](Device d) { check_forward(d, classifier(), "int8."); })
QKV_LORA_CASE(ClassifierInt8BaseTrajectory, [](Device d) { check_trajectory(d, classifier(), "int8."); })
TEST(LoraParity, ClassifierFiniteDifferences) { check_finite_differences(classifier(), 1e-2f); }
TEST(LoraParity, ClassifierMerged) { check_merged(classifier()); }

}  // namespace
}  // namespace qkv::lora_parity_test
