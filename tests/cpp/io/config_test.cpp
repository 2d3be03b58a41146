#include "qkv/config.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "qkv/error.h"
#include "test_util.h"

namespace qkv::config_test {
namespace {

using test::message_of;

TEST(ConfigJson, LanguageModelRoundTripsEveryField) {
  LanguageModelConfig c{
      .vocab_size = 65, .context = 64, .d_model = 128, .heads = 4, .layers = 4, .d_ff = 300, .seed = 99};
  c.activation = Activation::ReLU;
  c.norm = NormPosition::Post;
  c.bias = false;
  c.dropout = 0.25f;
  c.positions = Positions::Sinusoidal;
  c.scale_embedding = true;
  c.final_norm = false;
  c.tie_head = false;
  const auto back = language_model_config_from_json(to_json(c));
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_EQ(back.d_ff, 300);
  EXPECT_EQ(back.activation, Activation::ReLU);
  EXPECT_FALSE(back.tie_head);
  EXPECT_FLOAT_EQ(back.dropout, 0.25f);
}

TEST(ConfigJson, DefaultsFillOptionalFields) {
  const auto c =
      language_model_config_from_json(R"({"vocab_size": 10, "context": 8, "d_model": 16, "heads": 2, "layers": 1})");
  const LanguageModelConfig d;
  EXPECT_EQ(c.activation, d.activation);
  EXPECT_EQ(c.norm, d.norm);
  EXPECT_EQ(c.tie_head, d.tie_head);
  EXPECT_EQ(c.seed, d.seed);
  const auto s = seq2seq_config_from_json(
      R"({"src_vocab": 5000, "tgt_vocab": 5000, "context": 100, "d_model": 512, "heads": 8,
          "encoder_layers": 6, "decoder_layers": 6, "d_ff": 2048, "dropout": 0.1})");
  EXPECT_EQ(s.norm, NormPosition::Post);
  EXPECT_EQ(s.positions, Positions::Sinusoidal);
  EXPECT_TRUE(s.scale_embedding);
  EXPECT_EQ(seq2seq_config_from_json(to_json(s)).d_ff, 2048);
  const auto k = classifier_config_from_json(
      R"({"vocab_size": 5000, "context": 20, "d_model": 64, "heads": 8, "layers": 2, "d_ff": 128, "classes": 2})");
  EXPECT_EQ(k.pooling, Pooling::First);
  EXPECT_EQ(k.head, ClassifierHead::MLP);
  EXPECT_EQ(to_json(classifier_config_from_json(to_json(k))), to_json(k));
}

TEST(ConfigJson, OptimizerRoundTripsAndIsValidated) {
  OptimizerConfig o;
  o.kind = OptimizerKind::Adam;
  o.schedule = Schedule::InverseSqrt;
  o.warmup_steps = 4000;
  o.beta2 = 0.98f;
  EXPECT_EQ(to_json(optimizer_config_from_json(to_json(o))), to_json(o));
  EXPECT_NE(message_of([] { optimizer_config_from_json(R"({"lr": -1})"); }).find("lr = -1"), std::string::npos);
  EXPECT_NE(message_of([] {
              optimizer_config_from_json(R"({"schedule": "cosine", "total_steps": 0})");
            }).find("total_steps = 0"),
            std::string::npos);
}

TEST(ConfigJson, NonFiniteRoundTripsDefaultsToErrorAndIsValidated) {
  EXPECT_EQ(optimizer_config_from_json("{}").non_finite, NonFinite::Error);
  OptimizerConfig o;
  o.non_finite = NonFinite::Skip;
  EXPECT_NE(to_json(o).find(R"("non_finite":"skip")"), std::string::npos) << to_json(o);
  EXPECT_EQ(optimizer_config_from_json(to_json(o)).non_finite, NonFinite::Skip);
  EXPECT_EQ(to_json(optimizer_config_from_json(to_json(o))), to_json(o));
  EXPECT_EQ(optimizer_config_from_json(R"({"non_finite": "error"})").non_finite, NonFinite::Error);
  const std::string bad = message_of([] { optimizer_config_from_json(R"({"non_finite": "foo"})"); });
  EXPECT_NE(bad.find(R"(optimizer.non_finite = "foo" is unknown: expected "error" or "skip")"), std::string::npos)
      << bad;
  const std::string type = message_of([] { optimizer_config_from_json(R"({"non_finite": true})"); });
  EXPECT_NE(type.find("optimizer.non_finite must be a string, got boolean true"), std::string::npos) << type;
}

TEST(ConfigJson, BadInputNamesTheField) {
  const std::string base = R"("context": 8, "d_model": 16, "heads": 2, "layers": 1)";
  auto lm = [&](const std::string& extra) {
    return message_of([&] { language_model_config_from_json("{" + base + extra + "}"); });
  };
  EXPECT_NE(lm("").find("config.vocab_size is missing"), std::string::npos) << lm("");
  EXPECT_NE(lm(R"(, "vocab_size": "65")").find("config.vocab_size must be an integer, got string"), std::string::npos);
  EXPECT_NE(lm(R"(, "vocab_size": 6.5)").find("config.vocab_size must be an integer"), std::string::npos);
  // null reads as one word (it read "got null null").
  EXPECT_NE(lm(R"(, "vocab_size": 65, "dropout": null)").find("config.dropout must be a number, got null"),
            std::string::npos);
  EXPECT_EQ(lm(R"(, "vocab_size": 65, "dropout": null)").find("null null"), std::string::npos);
  EXPECT_NE(lm(R"(, "vocab_size": 65, "activation": "swish")").find("config.activation = \"swish\" is unknown"),
            std::string::npos);
  EXPECT_NE(lm(R"(, "vocab_size": 65, "dmodel": 3)").find("unknown field \"dmodel\""), std::string::npos);
  EXPECT_NE(lm(R"(, "vocab_size": 65, "bias": 1)").find("config.bias must be true or false"), std::string::npos);
  EXPECT_NE(message_of([] { language_model_config_from_json("{\"vocab_size\": 6"); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(message_of([] { language_model_config_from_json("[1, 2]"); }).find("must be an object"), std::string::npos);
}

// Every activation round-trips by its JSON name; an unknown one is refused naming all three.
TEST(ConfigJson, ActivationNamesRoundTrip) {
  for (const auto& [act, name] : {std::pair{Activation::ReLU, "relu"}, std::pair{Activation::GELU, "gelu"},
                                  std::pair{Activation::GELUTanh, "gelu_tanh"}}) {
    EXPECT_EQ(to_string(act), name);
    EXPECT_EQ(parse_activation(name), act);
    LanguageModelConfig c{.vocab_size = 10, .context = 8, .d_model = 16, .heads = 2, .layers = 1};
    c.activation = act;
    const std::string json = to_json(c);
    EXPECT_NE(json.find(std::string("\"activation\":\"") + name + "\""), std::string::npos) << json;
    EXPECT_EQ(language_model_config_from_json(json).activation, act);
  }
  EXPECT_EQ(message_of([] { parse_activation("gelu_new"); }),
            R"(activation = "gelu_new" is unknown: expected "relu", "gelu" or "gelu_tanh")");
}

TEST(ConfigJson, ModelRejectsValuesTheJsonAllows) {
  const auto c =
      language_model_config_from_json(R"({"vocab_size": 10, "context": 8, "d_model": 30, "heads": 4, "layers": 1})");
  EXPECT_NE(message_of([&] { LanguageModel lm(c); }).find("d_model = 30 must be divisible by heads = 4"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::config_test
