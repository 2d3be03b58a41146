// Checkpoints: save -> load gives the same outputs; with the optimizer state, training resumes on exactly
// the same trajectory; truncated, foreign and mismatched files raise qkv::Error and change nothing; a
// failed save leaves the previous file intact; extra metadata is stored, and the checkpoint's own keys
// cannot be replaced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "qkv/tokenizer.h"
#include "test_util.h"

namespace qkv::checkpoint_test {
namespace {

using test::message_of;

LanguageModelConfig lm_config() {
  LanguageModelConfig c{.vocab_size = 9, .context = 8, .d_model = 16, .heads = 2, .layers = 2};
  c.tie_head = false;
  return c;
}

struct Batch {
  std::vector<int32_t> in, tg;
};
Batch batch(int k) {
  Batch b{std::vector<int32_t>(16), std::vector<int32_t>(16)};
  for (int i = 0; i < 16; ++i) {
    b.in[i] = (i * 3 + k) % 9;
    b.tg[i] = (i * 5 + k + 1) % 9;
  }
  return b;
}

TEST(Checkpoint, SaveLoadGivesIdenticalLogits) {
  LanguageModel a(lm_config());
  const auto b0 = batch(0);
  a.train_step(b0.in, b0.tg, 2, 8);
  const auto bytes = a.save(false);
  const auto b = LanguageModel::load(bytes);
  EXPECT_EQ(a.logits(b0.in, 2, 8), b->logits(b0.in, 2, 8));
  EXPECT_EQ(b->config().tie_head, false);
  EXPECT_EQ(b->step(), 0);  // weights only: a fresh optimizer
  const auto file = parse_safetensors(bytes);
  EXPECT_EQ(file.metadata.at("qkv.model"), "language_model");
  EXPECT_TRUE(file.contains("lm_head.weight"));
  EXPECT_TRUE(file.contains("layers.1.self_attn.in_proj_weight"));
  EXPECT_FALSE(file.contains("optimizer.m.lm_head.weight"));
}

TEST(Checkpoint, TrainingResumesOnExactlyTheSameTrajectory) {
  auto c = lm_config();
  c.dropout = 0.1f;  // the dropout stream must resume too
  LanguageModel a(c);
  for (int s = 0; s < 5; ++s) a.train_step(batch(s).in, batch(s).tg, 2, 8);
  const auto saved = a.save(true);
  const auto b = LanguageModel::load(saved);
  EXPECT_EQ(b->step(), 5);
  for (int s = 5; s < 10; ++s) {
    const auto x = batch(s);
    EXPECT_EQ(a.train_step(x.in, x.tg, 2, 8), b->train_step(x.in, x.tg, 2, 8)) << "step " << s;
  }
}

TEST(Checkpoint, Seq2SeqAndClassifierRoundTrip) {
  Seq2SeqConfig sc{
      .src_vocab = 7, .tgt_vocab = 8, .context = 6, .d_model = 8, .heads = 2, .encoder_layers = 1, .decoder_layers = 1};
  Seq2Seq s(sc);
  const std::vector<int32_t> src = {1, 2, 3, 0}, ti = {1, 4, 5}, to = {4, 5, 2};
  s.train_step(src, ti, to, 1, 4, 3);
  const auto s2 = Seq2Seq::load(s.save());
  EXPECT_EQ(s.logits(src, ti, 1, 4, 3), s2->logits(src, ti, 1, 4, 3));
  ClassifierConfig cc{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3};
  Classifier k(cc);
  const std::vector<int32_t> tok = {1, 2, 3, 0, 0}, lab = {2};
  k.train_step(tok, lab, 1, 5);
  const auto k2 = Classifier::load(k.save());
  EXPECT_EQ(k.logits(tok, 1, 5), k2->logits(tok, 1, 5));
  // A classifier checkpoint is not a language model.
  EXPECT_NE(message_of([&] { LanguageModel::load(k.save()); }).find("holds a classifier, expected a language_model"),
            std::string::npos);
}

TEST(Checkpoint, TruncatedForeignAndMismatchedFilesAreRefusedAndChangeNothing) {
  LanguageModel a(lm_config());
  const auto bytes = a.save();
  for (size_t cut : {size_t{0}, size_t{7}, size_t{100}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(LanguageModel::load(std::span(bytes).first(cut)), Error) << "cut at " << cut;
  // A plain safetensors file that is not a qkv checkpoint.
  const std::vector<float> w(4, 1.f);
  const auto foreign = serialize_safetensors({TensorRef("weight", {2, 2}, std::span<const float>(w))}, {});
  EXPECT_NE(message_of([&] { LanguageModel::load(foreign); }).find("no \"qkv.model\" metadata"), std::string::npos);
  // A checkpoint of another shape loaded into this model.
  auto other = lm_config();
  other.d_model = 32;
  LanguageModel b(other);
  const auto before = a.logits(batch(0).in, 2, 8);
  EXPECT_NE(message_of([&] { a.load_state(b.save()); }).find("config field \"d_model\" is 32 in the checkpoint but 16"),
            std::string::npos);
  EXPECT_EQ(a.logits(batch(0).in, 2, 8), before);
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousFileIntact) {
  const auto dir = std::filesystem::temp_directory_path() / "qkv_checkpoint_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  LanguageModel a(lm_config());
  a.save_file(path);
  const auto first = LanguageModel::load_file(path);
  EXPECT_EQ(first->logits(batch(1).in, 2, 8), a.logits(batch(1).in, 2, 8));
  // Saving into a directory that does not exist fails with the path in the message.
  const std::string bad = (dir / "missing" / "model.safetensors").string();
  EXPECT_NE(message_of([&] { a.save_file(bad); }).find(bad), std::string::npos);
  EXPECT_NE(message_of([&] { LanguageModel::load_file(bad); }).find(bad), std::string::npos);
  // The good file still loads.
  EXPECT_NO_THROW(LanguageModel::load_file(path));
  std::filesystem::remove_all(dir);
}

// Extra metadata (what `qkv train` and the npm package's save({ tokenizer, metadata }) add) is written in the
// one header the core writes: it reads back as given, the tensors and their checksums are the same bytes as
// without it, and every loader still accepts the file.
TEST(Checkpoint, ExtraMetadataIsStoredAndTheFileStillLoadsAndVerifies) {
  LanguageModel a(lm_config());
  a.train_step(batch(0).in, batch(0).tg, 2, 8);
  const Tokenizer tok = Tokenizer::char_level("abcdefgh", {.pad = true, .bos = false, .eos = false, .unk = false});
  const std::map<std::string, std::string> extra = {
      {"qkv.tokenizer", tok.to_json()}, {"app.note", "caf\xc3\xa9 \"quoted\"\n"}, {"", "empty key"}};
  const auto plain = a.save(true), with = a.save(true, extra);
  const auto file = parse_safetensors(with), base = parse_safetensors(plain);
  for (const auto& [key, value] : extra) EXPECT_EQ(file.metadata.at(key), value) << key;
  EXPECT_EQ(file.metadata.size(), base.metadata.size() + extra.size());
  for (const auto& [key, value] : base.metadata) EXPECT_EQ(file.metadata.at(key), value) << key;  // crc32 included
  ASSERT_EQ(file.tensors.size(), base.tensors.size());
  for (size_t i = 0; i < file.tensors.size(); ++i) EXPECT_EQ(file.tensors[i].bytes, base.tensors[i].bytes);
  EXPECT_EQ(Tokenizer::from_json(file.metadata.at("qkv.tokenizer")).encode("hgfa"), tok.encode("hgfa"));

  const auto b = LanguageModel::load(with);  // verifies the CRC-32s
  EXPECT_EQ(b->logits(batch(1).in, 2, 8), a.logits(batch(1).in, 2, 8));
  EXPECT_EQ(b->step(), 1);
  LanguageModel c(lm_config());
  c.load_weights(with);
  EXPECT_EQ(c.logits(batch(1).in, 2, 8), a.logits(batch(1).in, 2, 8));

  // The checksums still guard the tensors: a flipped byte in the last tensor is refused.
  auto damaged = with;
  damaged.back() ^= 0x40;
  EXPECT_NE(message_of([&] { LanguageModel::load(damaged); }).find("is corrupt"), std::string::npos);

  // save_file writes the same bytes.
  const auto dir = std::filesystem::temp_directory_path() / "qkv_checkpoint_metadata_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  a.save_file(path, true, extra);
  EXPECT_EQ(read_safetensors(path).metadata.at("app.note"), extra.at("app.note"));
  EXPECT_EQ(LanguageModel::load_file(path)->logits(batch(1).in, 2, 8), a.logits(batch(1).in, 2, 8));
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, ExtraMetadataOnEveryModelKind) {
  const std::map<std::string, std::string> extra = {{"qkv.labels", "[\"a\",\"b\",\"c\"]"}, {"k", "v"}};
  Seq2SeqConfig sc{
      .src_vocab = 7, .tgt_vocab = 8, .context = 6, .d_model = 8, .heads = 2, .encoder_layers = 1, .decoder_layers = 1};
  Seq2Seq s(sc);
  const std::vector<int32_t> src = {1, 2, 3, 0}, ti = {1, 4, 5};
  const auto sb = s.save(false, extra);
  EXPECT_EQ(parse_safetensors(sb).metadata.at("k"), "v");
  EXPECT_EQ(Seq2Seq::load(sb)->logits(src, ti, 1, 4, 3), s.logits(src, ti, 1, 4, 3));
  ClassifierConfig cc{.vocab_size = 7, .context = 5, .d_model = 8, .heads = 2, .layers = 1, .classes = 3};
  Classifier k(cc);
  const std::vector<int32_t> tok = {1, 2, 3, 0, 0};
  const auto kb = k.save(true, extra);
  EXPECT_EQ(parse_safetensors(kb).metadata.at("qkv.labels"), extra.at("qkv.labels"));
  EXPECT_EQ(Classifier::load(kb)->logits(tok, 1, 5), k.logits(tok, 1, 5));
}

// The keys the checkpoint writes are what loading trusts (config, step, checksums): a caller cannot replace
// them, and the refusal names the key. A refused save_file leaves the previous file as it was.
TEST(Checkpoint, MetadataKeysTheCheckpointWritesAreRefused) {
  LanguageModel a(lm_config());
  const std::set<std::string> reserved = {"qkv.model",         "qkv.config", "qkv.optimizer",       "qkv.step",
                                          "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state", "qkv.version",
                                          "qkv.crc32",         "format"};
  // Exactly what a save without extra keys writes: a key the checkpoint adds later is reserved too.
  std::set<std::string> written;
  for (const auto& entry : parse_safetensors(a.save()).metadata) written.insert(entry.first);
  EXPECT_EQ(written, reserved);
  for (const std::string& key : reserved) {
    for (bool with_optimizer : {true, false}) {
      const std::string message = message_of([&] { a.save(with_optimizer, {{"ok", "1"}, {key, "x"}}); });
      EXPECT_NE(message.find("metadata key \"" + key + "\" is reserved"), std::string::npos) << message;
    }
  }
  // Keys only the qkv tool uses are not the checkpoint's: allowed.
  EXPECT_NO_THROW(a.save(true, {{"qkv.tokenizer", "{}"}, {"qkv.train", "{}"}, {"qkv.tokenizer.target", "{}"}}));

  const auto dir = std::filesystem::temp_directory_path() / "qkv_checkpoint_reserved_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  a.save_file(path, true, {{"app.note", "first"}});
  a.train_step(batch(0).in, batch(0).tg, 2, 8);
  EXPECT_NE(message_of([&] { a.save_file(path, true, {{"qkv.step", "99"}}); }).find(path), std::string::npos);
  const auto kept = read_safetensors(path);
  EXPECT_EQ(kept.metadata.at("app.note"), "first");
  EXPECT_EQ(kept.metadata.at("qkv.step"), "0");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qkv::checkpoint_test

namespace qkv::checkpoint_test {
namespace {

// A PyTorch state dict saved with qkv's names (here: the lm_gpt fixture's initial weights, written by the
// fixture script) loads by name, and the logits then match PyTorch's.
TEST(Checkpoint, LoadWeightsFromAPyTorchFile) {
  const auto f = read_safetensors(std::string(QKV_FIXTURES_DIR) + "/lm_gpt.safetensors");
  std::vector<TensorRef> refs;
  std::vector<std::vector<float>> keep;
  for (const auto& t : f.tensors) {
    if (t.name.rfind("param.", 0) != 0) continue;
    keep.push_back(f.floats(t.name));
    refs.emplace_back(t.name.substr(6), t.shape, std::span<const float>(keep.back()));
  }
  const auto bytes = serialize_safetensors(refs, {});
  LanguageModelConfig c{.vocab_size = 13, .context = 10, .d_model = 32, .heads = 4, .layers = 2, .d_ff = 64};
  LanguageModel lm(c);
  lm.load_weights(bytes);
  const auto ids = f.ints("input.ids");
  const std::vector<int32_t> in(ids.begin(), ids.end());
  const auto got = lm.logits(in, 4, 10), want = f.floats("output.logits");
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  EXPECT_LT(worst, 1e-4);
  // One tensor short: refused, nothing changed.
  refs.pop_back();
  EXPECT_THROW(lm.load_weights(serialize_safetensors(refs, {})), Error);
  EXPECT_EQ(lm.logits(in, 4, 10), got);
}

}  // namespace
}  // namespace qkv::checkpoint_test
