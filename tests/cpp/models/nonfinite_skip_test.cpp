// OptimizerConfig::non_finite = NonFinite::Skip on the three models: a step whose loss or gradient norm is
// not finite returns instead of throwing, leaves every weight and Adam moment bit for bit as it was, keeps
// step() (so the schedule's position), zeroes the gradients and counts itself in skipped_steps(); the next
// good step is then exactly the step of a twin that never saw the bad batch. With gradient accumulation a
// non-finite micro-batch skips the whole optimizer step. The count survives save/load with the optimizer
// state. (The default, NonFinite::Error, is tested in language_model_test, bad_input_test and
// train/nonfinite_test, unchanged.)
//
// Dropout is off (every config's default): the skipped step's forward pass still draws its dropout seed, as
// a skipped step in PyTorch still advances the RNG, so with dropout on the twin would draw other masks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::nonfinite_skip_test {
namespace {

using test::message_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Everything an optimizer step may change, as bit patterns (so that NaN == NaN): every weight and both
// Adam moments, tensor by tensor.
template <class M>
std::vector<uint32_t> state_bits(M& m) {
  std::vector<uint32_t> out;
  for (const ParameterView& p : m.parameters())
    for (const auto* s : {&p.value, &p.m, &p.v})
      for (float x : *s) out.push_back(std::bit_cast<uint32_t>(x));
  return out;
}

template <class M>
bool grads_are_zero(M& m) {
  for (const ParameterView& p : m.parameters())
    for (float g : p.grad)
      if (g != 0.f) return false;
  return true;
}

// What one skipped step leaves, whatever made it non-finite: the skip is reported and counted once, the step
// count t (and so the next step's learning rate) is unchanged, every weight and moment keeps its bits, and the
// gradients are cleared.
template <class M>
void expect_skipped_once(M& m, int step, const std::vector<uint32_t>& state) {
  EXPECT_TRUE(m.last_step_skipped());
  EXPECT_EQ(m.skipped_steps(), 1);
  EXPECT_EQ(m.step(), step);
  EXPECT_EQ(state_bits(m), state);
  EXPECT_TRUE(grads_are_zero(m));
}

// The optimizer every test here uses: Skip, and a warm-up so that the lr depends on step(): a skip that
// advanced the step count would change the next update and show in the twin comparison.
OptimizerConfig skip_config() {
  OptimizerConfig o;
  o.non_finite = NonFinite::Skip;
  o.lr = 3e-3f;
  o.warmup_steps = 10;
  return o;
}

// One case per model: how to build one and take training step s (a different batch per s).
struct LmCase {
  using Model = LanguageModel;
  static constexpr const char* poisoned = "tok_emb.weight";
  static std::unique_ptr<Model> make(const OptimizerConfig& o) {
    return std::make_unique<Model>(
        LanguageModelConfig{.vocab_size = 8, .context = 8, .d_model = 16, .heads = 2, .layers = 1}, o);
  }
  static void batch(int s, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
    in.resize(16);
    tg.resize(16);
    for (int i = 0; i < 16; ++i) {
      in[i] = (i * 3 + s) % 8;
      tg[i] = (i * 5 + 2 * s + 1) % 8;
    }
  }
  static float step(Model& m, int s) {
    std::vector<int32_t> in, tg;
    batch(s, in, tg);
    return m.train_step(in, tg, 2, 8);
  }
  static float accumulate(Model& m, int s, float weight) {
    std::vector<int32_t> in, tg;
    batch(s, in, tg);
    return m.accumulate(in, tg, 2, 8, weight);
  }
};

struct Seq2SeqCase {
  using Model = Seq2Seq;
  static constexpr const char* poisoned = "generator.bias";
  static std::unique_ptr<Model> make(const OptimizerConfig& o) {
    return std::make_unique<Model>(Seq2SeqConfig{.src_vocab = 7,
                                                 .tgt_vocab = 8,
                                                 .context = 6,
                                                 .d_model = 8,
                                                 .heads = 2,
                                                 .encoder_layers = 1,
                                                 .decoder_layers = 1},
                                   o);
  }
  struct Batch {
    std::vector<int32_t> src, ti, to;
  };
  static Batch batch(int s) {
    const int32_t a = 1 + s % 5, b = 1 + (s + 2) % 6;
    return {{a, 2, b, 0, 3, a, 0, 0}, {1, b, 5, 1, 3, 4}, {b, 5, 2, 3, 4, 2}};
  }
  static float step(Model& m, int s) {
    const Batch x = batch(s);
    return m.train_step(x.src, x.ti, x.to, 2, 4, 3);
  }
  static float accumulate(Model& m, int s, float weight) {
    const Batch x = batch(s);
    return m.accumulate(x.src, x.ti, x.to, 2, 4, 3, weight);
  }
};

struct ClassifierCase {
  using Model = Classifier;
  static constexpr const char* poisoned = "classifier.3.bias";  // the MLP head's last bias
  static std::unique_ptr<Model> make(const OptimizerConfig& o) {
    return std::make_unique<Model>(
        ClassifierConfig{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3}, o);
  }
  static float step(Model& m, int s) {
    const std::vector<int32_t> tok = {1, 2 + s % 4, 3, 0, 0, 4, 1 + s % 6, 2, 5, 0}, lab = {s % 3, (s + 1) % 3};
    return m.train_step(tok, lab, 2, 5);
  }
  static float accumulate(Model& m, int s, float weight) {
    const std::vector<int32_t> tok = {1, 2 + s % 4, 3, 0, 0, 4, 1 + s % 6, 2, 5, 0}, lab = {s % 3, (s + 1) % 3};
    return m.accumulate(tok, lab, 2, 5, weight);
  }
};

template <class M>
ParameterView param(M& m, const std::string& name) {
  for (const ParameterView& p : m.parameters())
    if (name == p.name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return m.parameters().front();
}

template <class Case>
class NonFiniteSkip : public ::testing::Test {};
using Cases = ::testing::Types<LmCase, Seq2SeqCase, ClassifierCase>;
TYPED_TEST_SUITE(NonFiniteSkip, Cases);

// A weight set to NaN or inf (as the Error tests do) makes the loss non-finite: the step is skipped with
// nothing changed, then, with the weight put back, the next step is the twin's step exactly.
TYPED_TEST(NonFiniteSkip, ANonFiniteLossIsSkippedCountedAndTheNextStepIsTheTwins) {
  for (float bad : {kNaN, kInf}) {
    auto a = TypeParam::make(skip_config()), twin = TypeParam::make(skip_config());
    for (int s = 0; s < 2; ++s) {
      ASSERT_EQ(TypeParam::step(*a, s), TypeParam::step(*twin, s));
      EXPECT_FALSE(a->last_step_skipped());
    }
    const std::vector<uint32_t> before = state_bits(*a);
    ASSERT_EQ(before, state_bits(*twin));

    ParameterView p = param(*a, TypeParam::poisoned);
    const float kept = p.value[0];
    p.value[0] = bad;
    const std::vector<uint32_t> poisoned = state_bits(*a);
    float loss = 0.f;
    ASSERT_NO_THROW(loss = TypeParam::step(*a, 2));
    EXPECT_FALSE(std::isfinite(loss)) << loss;  // the returned loss tells it too
    expect_skipped_once(*a, 2, poisoned);

    p.value[0] = kept;
    ASSERT_EQ(state_bits(*a), before);
    for (int s = 3; s < 5; ++s) {
      const float la = TypeParam::step(*a, s), lt = TypeParam::step(*twin, s);
      EXPECT_EQ(la, lt) << "step " << s;
      EXPECT_TRUE(std::isfinite(la));
      EXPECT_FALSE(a->last_step_skipped());
    }
    EXPECT_EQ(a->step(), 4);
    EXPECT_EQ(twin->step(), 4);
    EXPECT_EQ(a->skipped_steps(), 1);
    EXPECT_EQ(twin->skipped_steps(), 0);
    EXPECT_EQ(state_bits(*a), state_bits(*twin));
  }
}

// A finite loss with a non-finite gradient (which only the gradient norm sees) is skipped the same way.
TYPED_TEST(NonFiniteSkip, ANonFiniteGradientWithAFiniteLossIsSkipped) {
  auto a = TypeParam::make(skip_config()), twin = TypeParam::make(skip_config());
  ASSERT_EQ(TypeParam::step(*a, 0), TypeParam::step(*twin, 0));
  const std::vector<uint32_t> before = state_bits(*a);

  a->zero_grad();
  EXPECT_TRUE(std::isfinite(TypeParam::accumulate(*a, 1, 1.f)));
  param(*a, TypeParam::poisoned).grad[0] = -kInf;
  EXPECT_FALSE(a->apply_gradients());
  expect_skipped_once(*a, 1, before);

  EXPECT_EQ(TypeParam::step(*a, 2), TypeParam::step(*twin, 2));
  EXPECT_EQ(state_bits(*a), state_bits(*twin));
  EXPECT_EQ(a->step(), 2);
}

// Gradient accumulation: a micro-batch with a non-finite loss returns it (no throw, no gradient added) and
// the apply_gradients() that follows skips the whole step, even though the other micro-batches were fine.
// zero_grad() starts a new accumulation, forgetting the bad micro-batch.
TYPED_TEST(NonFiniteSkip, ANonFiniteMicroBatchSkipsTheWholeAccumulatedStep) {
  auto a = TypeParam::make(skip_config()), twin = TypeParam::make(skip_config());
  ASSERT_EQ(TypeParam::step(*a, 0), TypeParam::step(*twin, 0));
  const std::vector<uint32_t> before = state_bits(*a);
  ParameterView p = param(*a, TypeParam::poisoned);
  const float kept = p.value[0];

  a->zero_grad();
  EXPECT_TRUE(std::isfinite(TypeParam::accumulate(*a, 1, 0.5f)));
  p.value[0] = kNaN;
  float bad = 0.f;
  ASSERT_NO_THROW(bad = TypeParam::accumulate(*a, 2, 0.5f));
  EXPECT_TRUE(std::isnan(bad));
  p.value[0] = kept;
  EXPECT_TRUE(std::isfinite(TypeParam::accumulate(*a, 3, 0.5f)));
  EXPECT_FALSE(a->apply_gradients());
  expect_skipped_once(*a, 1, before);

  // A bad micro-batch followed by zero_grad() no longer counts.
  p.value[0] = kNaN;
  TypeParam::accumulate(*a, 2, 0.5f);
  p.value[0] = kept;
  for (auto* m : {a.get(), twin.get()}) {
    m->zero_grad();
    TypeParam::accumulate(*m, 1, 0.5f);
    TypeParam::accumulate(*m, 3, 0.5f);
    EXPECT_TRUE(m->apply_gradients());
    EXPECT_FALSE(m->last_step_skipped());
  }
  EXPECT_EQ(a->skipped_steps(), 1);
  EXPECT_EQ(a->step(), 2);
  EXPECT_EQ(state_bits(*a), state_bits(*twin));
}

// The default: the old behaviour, and nothing counted.
TYPED_TEST(NonFiniteSkip, UnderErrorTheStepThrowsAndNothingIsCounted) {
  auto a = TypeParam::make(OptimizerConfig{});
  TypeParam::step(*a, 0);
  param(*a, TypeParam::poisoned).value[0] = kNaN;
  EXPECT_NE(message_of([&] { TypeParam::step(*a, 1); }).find("the loss is not finite"), std::string::npos);
  EXPECT_EQ(a->skipped_steps(), 0);
  EXPECT_FALSE(a->last_step_skipped());
  EXPECT_EQ(a->step(), 1);
}

// The policy and the count travel in checkpoints (the count with the optimizer state, as the step count);
// set_non_finite changes the policy of a loaded model.
TYPED_TEST(NonFiniteSkip, TheCountAndThePolicySurviveSaveAndLoad) {
  auto a = TypeParam::make(skip_config());
  TypeParam::step(*a, 0);
  ParameterView p = param(*a, TypeParam::poisoned);
  const float kept = p.value[0];
  p.value[0] = kInf;
  TypeParam::step(*a, 1);
  p.value[0] = kept;
  ASSERT_EQ(a->skipped_steps(), 1);

  const std::vector<uint8_t> bytes = a->save();
  EXPECT_EQ(parse_safetensors(bytes).metadata.at("qkv.skipped_steps"), "1");
  auto b = TypeParam::Model::load(bytes);
  EXPECT_EQ(b->skipped_steps(), 1);
  EXPECT_EQ(b->step(), 1);
  EXPECT_EQ(b->optimizer().non_finite, NonFinite::Skip);
  EXPECT_EQ(TypeParam::step(*a, 2), TypeParam::step(*b, 2));  // resumes on the same trajectory
  EXPECT_EQ(state_bits(*a), state_bits(*b));

  auto weights_only = TypeParam::Model::load(a->save(/*with_optimizer=*/false));
  EXPECT_EQ(weights_only->skipped_steps(), 0);  // a fresh optimizer, as step() == 0
  EXPECT_EQ(weights_only->step(), 0);
  EXPECT_EQ(weights_only->optimizer().non_finite, NonFinite::Skip);

  b->set_non_finite(NonFinite::Error);
  EXPECT_EQ(b->optimizer().non_finite, NonFinite::Error);
  param(*b, TypeParam::poisoned).value[0] = kNaN;
  EXPECT_NE(message_of([&] { TypeParam::step(*b, 3); }).find("not finite"), std::string::npos);
  EXPECT_EQ(b->skipped_steps(), 1);
}

// A parsed file written back (the tensors, and so their CRCs, as they were): for editing the metadata.
std::vector<uint8_t> serialize(const SafetensorsFile& f) {
  std::vector<std::vector<float>> data;
  data.reserve(f.tensors.size());
  std::vector<TensorRef> refs;
  for (const TensorEntry& t : f.tensors) {
    data.push_back(f.floats(t.name));
    refs.emplace_back(t.name, t.shape, std::span<const float>(data.back()));
  }
  return serialize_safetensors(refs, f.metadata);
}

TEST(NonFiniteSkipCheckpoint, ABadCountIsRefusedNamingTheKeyAndAMissingOneIsZero) {
  auto a = LmCase::make(skip_config());
  LmCase::step(*a, 0);
  const std::vector<uint8_t> bytes = a->save();
  for (const char* bad : {"-1", "x", "1.5", ""}) {
    SafetensorsFile f = parse_safetensors(bytes);
    f.metadata["qkv.skipped_steps"] = bad;
    const std::string m = message_of([&] { LanguageModel::load(serialize(f)); });
    EXPECT_NE(m.find("\"qkv.skipped_steps\" = \"" + std::string(bad) + "\" is invalid: expected an integer >= 0"),
              std::string::npos)
        << m;
  }
  // A checkpoint from before the option: no key, nothing skipped.
  SafetensorsFile f = parse_safetensors(bytes);
  ASSERT_EQ(f.metadata.erase("qkv.skipped_steps"), 1u);
  auto old = LanguageModel::load(serialize(f));
  EXPECT_EQ(old->skipped_steps(), 0);
  EXPECT_EQ(old->step(), 1);
}

}  // namespace
}  // namespace qkv::nonfinite_skip_test
