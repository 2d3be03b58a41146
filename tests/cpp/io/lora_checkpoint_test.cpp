// Checkpoints of a model with LoRA adapters (io/checkpoint.h): base + adapters + the adapters' optimizer state, the
// options in "qkv.lora"; training resumes bit for bit through every way of loading (load, load_file, the streaming
// CheckpointLoader, load_state), on a float32 and a quantized base; the mismatches are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "models/lora_cases.h"
#include "qkv/checkpoint_loader.h"
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::lora_checkpoint_test {
namespace {

LanguageModelConfig tiny_lm() {
  return {.vocab_size = 13, .context = 8, .d_model = 16, .heads = 2, .layers = 2, .d_ff = 24, .dropout = 0.1f};
}

// Adapter dropout on: the adapters' masks depend on the pass counter the checkpoint keeps.
LoraOptions lora(std::vector<std::string> targets = {"qkv", "out", "up", "down"}) {
  return test::lora_options(std::move(targets), 2, 4.f, 0.2f, 3);
}

struct Batch {
  std::vector<int32_t> in, tg;
};
Batch batch(uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (int i = 0; i < 2 * 8; ++i) {
    b.in.push_back(static_cast<int32_t>(rng.next_u64() % 13));
    b.tg.push_back(static_cast<int32_t>(rng.next_u64() % 13));
  }
  return b;
}

std::vector<float> train(LanguageModel& m, int from, int steps) {
  std::vector<float> losses;
  for (int s = from; s < from + steps; ++s) {
    const Batch b = batch(100 + s);
    losses.push_back(m.train_step(b.in, b.tg, 2, 8));
  }
  return losses;
}

std::map<std::string, std::vector<float>> adapters_of(Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (const ParameterView& p : m.lora_parameters()) {
    out[p.name] = {p.value.begin(), p.value.end()};
    out[std::string("m.") + p.name] = {p.m.begin(), p.m.end()};
    out[std::string("v.") + p.name] = {p.v.begin(), p.v.end()};
  }
  return out;
}

// A model trained 3 steps with adapters, its checkpoint, then 3 more steps: every way of loading the checkpoint
// continues with the same losses and ends with the same adapters and moments, bit for bit.
void expect_resumes_exactly(const std::function<void(LanguageModel&)>& prepare) {
  LanguageModel a(tiny_lm());
  test::randomize_weights(a, 7);
  prepare(a);
  a.add_lora(lora());
  train(a, 0, 3);
  const std::vector<uint8_t> bytes = a.save();
  const std::string path = testing::TempDir() + "/qkv_lora_checkpoint.safetensors";
  a.save_file(path);
  const std::vector<float> want = train(a, 3, 3);
  EXPECT_EQ(a.step(), 6);

  const SafetensorsFile f = parse_safetensors(bytes);
  EXPECT_EQ(f.metadata.at("qkv.lora"), "rank=2,alpha=4,dropout=0.2,targets=qkv+out+up+down,seed=3");
  EXPECT_EQ(f.metadata.at("qkv.step"), "3");
  EXPECT_TRUE(f.contains("layers.1.linear2.lora_B.weight"));
  EXPECT_TRUE(f.contains("optimizer.m.layers.1.linear2.lora_B.weight"));
  EXPECT_FALSE(f.contains("optimizer.m.layers.1.linear2.weight"));  // the frozen base has no moments

  std::vector<std::unique_ptr<LanguageModel>> loaded;
  loaded.push_back(LanguageModel::load(bytes));
  loaded.push_back(LanguageModel::load_file(path));
  CheckpointLoader<LanguageModel> loader(bytes.size());
  for (size_t at = 0; at < bytes.size(); at += 1000)
    loader.push(std::span<const uint8_t>(bytes).subspan(at, std::min<size_t>(1000, bytes.size() - at)));
  loaded.push_back(loader.finish());
  for (auto& m : loaded) {
    ASSERT_TRUE(m->has_lora());
    EXPECT_EQ(to_string(m->lora_options()), to_string(lora()));
    EXPECT_EQ(m->step(), 3);
    EXPECT_EQ(train(*m, 3, 3), want);
    EXPECT_EQ(adapters_of(*m), adapters_of(a));
  }
  // load_state into a model of the same config without adapters: they are added, and training resumes alike.
  LanguageModel b(tiny_lm());
  prepare(b);
  b.load_state(bytes);
  ASSERT_TRUE(b.has_lora());
  EXPECT_EQ(train(b, 3, 3), want);
  EXPECT_EQ(adapters_of(b), adapters_of(a));
}

TEST(LoraCheckpoint, ResumesBitForBitOnAFloat32Base) {
  expect_resumes_exactly([](LanguageModel&) {});
}

TEST(LoraCheckpoint, ResumesBitForBitOnAQuantizedBase) {
  expect_resumes_exactly([](LanguageModel& m) { m.quantize(WeightFormat::Int8); });
}

TEST(LoraCheckpoint, WithoutOptimizerStateTheAdaptersLoadAndTheStepsRestart) {
  LanguageModel a(tiny_lm());
  a.add_lora(lora({"q", "v", "head"}));
  train(a, 0, 2);
  const auto m = LanguageModel::load(a.save(false));
  ASSERT_TRUE(m->has_lora());
  EXPECT_EQ(m->step(), 0);
  for (const ParameterView& p : m->lora_parameters())
    for (const ParameterView& q : a.lora_parameters())
      if (std::string(p.name) == q.name) {  // braces: gtest's EXPECT inside an if (-Wdangling-else)
        EXPECT_EQ(std::vector<float>(p.value.begin(), p.value.end()),
                  std::vector<float>(q.value.begin(), q.value.end()))
            << p.name;
      }
}

TEST(LoraCheckpoint, Seq2SeqAndClassifierRoundTrip) {
  Seq2SeqConfig s;
  s.src_vocab = 9;
  s.tgt_vocab = 7;
  s.context = 8;
  s.d_model = 8;
  s.heads = 2;
  s.encoder_layers = 1;
  s.decoder_layers = 1;
  Seq2Seq a(s);
  a.add_lora(lora({"qkv", "out", "head"}));
  test::randomize_weights(a, 2);  // the adapters' B too: non-zero values to compare
  for (const ParameterView& p : a.lora_parameters()) std::fill(p.value.begin(), p.value.end(), 0.25f);
  const auto b = Seq2Seq::load(a.save());
  ASSERT_TRUE(b->has_lora());
  EXPECT_EQ(adapters_of(*b), adapters_of(a));
  ClassifierConfig c;
  c.vocab_size = 9;
  c.context = 8;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.classes = 3;
  Classifier x(c);
  x.add_lora(lora({"v", "head"}));
  for (const ParameterView& p : x.lora_parameters()) std::fill(p.value.begin(), p.value.end(), -0.5f);
  const auto y = Classifier::load(x.save());
  EXPECT_EQ(to_string(y->lora_options()), to_string(lora({"v", "head"})));
  EXPECT_EQ(adapters_of(*y), adapters_of(x));
}

TEST(LoraCheckpoint, Refusals) {
  LanguageModel a(tiny_lm());
  a.add_lora(lora());
  // "qkv.lora" is the checkpoint's own key, with or without adapters.
  const std::string reserved = test::message_of([&] { a.save(true, {{"qkv.lora", "rank=1"}}); });
  EXPECT_NE(reserved.find("metadata key \"qkv.lora\" is reserved"), std::string::npos) << reserved;
  LanguageModel plain(tiny_lm());
  EXPECT_NE(test::message_of([&] {
              plain.save(true, {{"qkv.lora", "x"}});
            }).find("\"qkv.lora\" is reserved"),
            std::string::npos);
  const std::vector<uint8_t> with = a.save(), without = plain.save();
  // A model with other adapters, or with adapters the file lacks, is refused and keeps its own.
  LanguageModel other(tiny_lm());
  other.add_lora(lora({"up"}));
  const std::string differ = test::message_of([&] { other.load_state(with); });
  EXPECT_NE(differ.find("the file's LoRA adapters (\"qkv.lora\" = \"rank=2,alpha=4,dropout=0.2,targets=qkv+out+up+"
                        "down,seed=3\") are not this model's (rank=2,alpha=4,dropout=0.2,targets=up,seed=3)"),
            std::string::npos)
      << differ;
  EXPECT_EQ(to_string(other.lora_options()), to_string(lora({"up"})));
  const std::string lacks = test::message_of([&] { other.load_state(without); });
  EXPECT_NE(lacks.find("this model has LoRA adapters (rank=2,alpha=4,dropout=0.2,targets=up,seed=3) and the file none"),
            std::string::npos)
      << lacks;
  // A file whose adapters' tensors do not fit: nothing is added.
  std::vector<uint8_t> bad = with;
  const std::string key = "rank=2,alpha=4,dropout=0.2,targets=qkv+out+up+down,seed=3";
  const std::string repl = "rank=3,alpha=4,dropout=0.2,targets=qkv+out+up+down,seed=3";
  const auto at = std::search(bad.begin(), bad.end(), key.begin(), key.end());
  ASSERT_NE(at, bad.end());
  std::copy(repl.begin(), repl.end(), at);
  LanguageModel fresh(tiny_lm());
  const std::string shapes = test::message_of([&] { fresh.load_state(bad); });
  EXPECT_NE(shapes.find("tensor \"layers.0.self_attn.in_proj.lora_A.weight\" has shape (2, 16), expected (3, 16)"),
            std::string::npos)
      << shapes;
  EXPECT_FALSE(fresh.has_lora());
  EXPECT_NE(test::message_of([&] { LanguageModel::load(bad); }).find("expected (3, 16)"), std::string::npos);
  // An unreadable "qkv.lora".
  std::vector<uint8_t> junk = with;
  const std::string j = "rank=2,alpha=4,dropout=0.2,targets=qkv+out+up+down,seed=3";
  const auto jt = std::search(junk.begin(), junk.end(), j.begin(), j.end());
  const std::string k = "rank=2,alpha=4,dropout=0.2,targets=qkv+zzz+up+down,seed=3";
  std::copy(k.begin(), k.end(), jt);
  const std::string unreadable = test::message_of([&] { LanguageModel::load(junk); });
  EXPECT_NE(unreadable.find("\"qkv.lora\" = \"rank=2,alpha=4,dropout=0.2,targets=qkv+zzz+up+down,seed=3\" is invalid"),
            std::string::npos)
      << unreadable;
}

// load_weights with adapters on one side only is refused saying so, the model unchanged.
TEST(LoraCheckpoint, LoadWeightsWithAdaptersOnOneSideIsRefusedSayingSo) {
  LanguageModel with(tiny_lm()), without(tiny_lm());
  with.add_lora(lora());
  const std::vector<uint8_t> with_bytes = with.save(false), without_bytes = without.save(false);
  const auto logits = with.logits(batch(1).in, 2, 8);
  const std::string base_only = test::message_of([&] { with.load_weights(without_bytes); });
  EXPECT_NE(base_only.find("load_weights: this model has LoRA adapters (rank=2,alpha=4,dropout=0.2,targets=qkv+out+up+"
                           "down,seed=3) and the file none of their tensors: remove_lora() first"),
            std::string::npos)
      << base_only;
  EXPECT_EQ(with.logits(batch(1).in, 2, 8), logits);
  const std::string adapters = test::message_of([&] { without.load_weights(with_bytes); });
  EXPECT_NE(adapters.find("load_weights: the file holds LoRA adapter tensors (\"layers.0.self_attn.in_proj.lora_A."
                          "weight\") and this model has no adapters"),
            std::string::npos)
      << adapters;
  EXPECT_FALSE(without.has_lora());
  with.load_weights(with_bytes);  // adapters on both sides: loads
  EXPECT_EQ(with.logits(batch(1).in, 2, 8), logits);
}

// A refused file leaves a trained model as it was, its optimizer state included: the file's adapters are checked
// before they are attached (attaching releases the base's gradients and Adam moments, and removing them again
// restarts the optimizer).
TEST(LoraCheckpoint, RefusedFileKeepsTheOptimizerState) {
  LanguageModel source(tiny_lm());
  source.add_lora(lora());
  std::vector<uint8_t> bad = source.save();
  const std::string key = "rank=2,alpha=4,dropout=0.2,targets=qkv+out+up+down,seed=3";
  const std::string repl = "rank=3,alpha=4,dropout=0.2,targets=qkv+out+up+down,seed=3";
  const auto at = std::search(bad.begin(), bad.end(), key.begin(), key.end());
  ASSERT_NE(at, bad.end());
  std::copy(repl.begin(), repl.end(), at);
  LanguageModel a(tiny_lm()), twin(tiny_lm());
  train(a, 0, 2);
  train(twin, 0, 2);
  const std::string refused = test::message_of([&] { a.load_state(bad); });
  EXPECT_NE(refused.find("expected (3, 16)"), std::string::npos) << refused;
  EXPECT_FALSE(a.has_lora());
  EXPECT_EQ(a.step(), 2);
  EXPECT_EQ(train(a, 2, 3), train(twin, 2, 3));  // the same moments: the same losses, bit for bit
}

}  // namespace
}  // namespace qkv::lora_checkpoint_test
