// Loading foreign state dicts: what is refused, and how (parity with PyTorch is in parity/import_parity_test).
#include "qkv/import.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::import_test {
namespace {

using test::message_of;

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

std::string fixture(const std::string& c) { return std::string(QKV_FIXTURES_DIR) + "/import/" + c + ".safetensors"; }

// The seed 004 fixture's tensors, edited: `drop` removed, `reshape` given a wrong shape, `extra` added.
std::vector<uint8_t> edited(const std::string& drop, const std::string& reshape, const std::string& extra) {
  const auto f = read_safetensors(fixture("seed004_transformer"));
  std::vector<TensorRef> refs;
  std::vector<std::vector<float>> keep;
  keep.reserve(f.tensors.size() + 1);
  for (const auto& t : f.tensors) {
    if (t.name == drop) continue;
    keep.push_back(f.floats(t.name));
    std::vector<int64_t> shape = t.shape;
    if (t.name == reshape) {
      keep.back().resize(keep.back().size() / shape[0]);
      shape[0] = 1;
    }
    refs.emplace_back(t.name, shape, std::span<const float>(keep.back()));
  }
  keep.push_back({1.f, 2.f});
  refs.emplace_back(extra, std::vector<int64_t>{2}, std::span<const float>(keep.back()));
  return serialize_safetensors(refs, {});
}

Seq2SeqConfig seed004_config(int heads = 4) {
  return {.src_vocab = 11,
          .tgt_vocab = 12,
          .context = 12,
          .d_model = 16,
          .heads = heads,
          .encoder_layers = 2,
          .decoder_layers = 2,
          .d_ff = 32,
          .positions = Positions::Learned,
          .scale_embedding = false,
          .final_norm = false};
}

// A file that cannot be mapped: every missing, mis-shaped and left-over tensor named in one error, in the
// file's own names, and the model unchanged.
TEST(Import, NamesEveryMissingMisshapedAndLeftOverTensorAtOnce) {
  Seq2Seq m(seed004_config());
  const std::vector<int32_t> src = {1, 2, 3}, tgt = {1, 2};
  const auto before = m.logits(src, tgt, 1, 3, 2);
  const auto bytes = edited("decoder.layers.1.transformer_block.attention.keys.weight",
                            "encoder.layers.0.feed_forward.0.weight", "encoder.layers.0.attention.extra");
  const std::string e = message_of([&] { m.load_weights(bytes); });
  EXPECT_HAS(e, "format seed004");
  EXPECT_HAS(e, "tensor \"decoder.layers.1.transformer_block.attention.keys.weight\" is missing");
  EXPECT_HAS(e, "tensor \"encoder.layers.0.feed_forward.0.weight\" has shape (1, 16), expected (32, 16)");
  EXPECT_HAS(e, "tensor \"encoder.layers.0.attention.extra\" is not a parameter of this model");
  EXPECT_EQ(m.logits(src, tgt, 1, 3, 2), before);
  // The same through import_weights (what `qkv import` runs).
  EXPECT_HAS(message_of([&] { import_weights(bytes); }), "keys.weight\" is missing");
}

// qkv's own names: all problems at once too.
TEST(Import, QkvNamesReportEveryProblemAtOnce) {
  LanguageModelConfig small{.vocab_size = 13, .context = 8, .d_model = 16, .heads = 4, .layers = 1};
  LanguageModel a(small);
  LanguageModelConfig big = small;
  big.layers = 2;
  big.vocab_size = 14;
  LanguageModel b(big);
  const std::string e = message_of([&] { a.load_weights(b.save(false)); });
  EXPECT_HAS(e, "tensor \"tok_emb.weight\" has shape (14, 16), expected (13, 16)");
  EXPECT_HAS(e, "tensor \"layers.1.norm1.weight\" is not a parameter of this model");
  EXPECT_HAS(e, "tensor \"layers.1.linear2.weight\" is not a parameter of this model");
}

// Seed 004's per-head projections fix the number of heads: another count is refused, naming both.
TEST(Import, Seed004HeadsMustMatchTheProjections) {
  Seq2Seq m(seed004_config(2));
  EXPECT_HAS(message_of([&] { m.load_weights(io::read_file(fixture("seed004_transformer"))); }),
             "is a per-head projection of 4 x 4, so the model needs heads = 4, not 2");
  ImportOptions o;
  o.heads = 8;
  EXPECT_HAS(message_of([&] { import_weights(io::read_file(fixture("seed004_transformer")), o); }),
             "heads = 8 but the file's per-head projections (4 x 4) make 4 heads");
}

// What shapes cannot tell is asked for by name.
TEST(Import, HeadsAreRequiredWhereShapesCannotTellThem) {
  EXPECT_HAS(message_of([&] { import_weights(io::read_file(fixture("nanogpt_bias"))); }),
             "import: heads = 0: a nanogpt file's shapes cannot tell the number of attention heads; give it "
             "(qkv import --heads N");
  ImportOptions o;
  o.from = "keras";
  o.heads = 4;
  EXPECT_HAS(message_of([&] { import_weights(io::read_file(fixture("nanogpt_bias")), o); }),
             "format \"keras\" is unknown: expected one of qkv, torch, nanogpt, seed000");
}

// A pickle (torch.save) is refused with the line that converts it, everywhere a file is read.
TEST(Import, PickleIsRefusedWithTheSafetensorsHint) {
  const std::string hint = "safetensors.torch.save_file(model.state_dict(), \"model.safetensors\")";
  // torch.save since 1.6: a zip archive; before: a bare pickle, protocol 2.
  const std::vector<uint8_t> zip = {'P', 'K', 3, 4, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<uint8_t> legacy = {0x80, 2, 0x8a, 10, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  LanguageModel lm({.vocab_size = 13, .context = 8, .d_model = 16, .heads = 4, .layers = 1});
  for (const auto& bytes : {zip, legacy}) {
    const std::string e = message_of([&] { lm.load_weights(bytes); });
    EXPECT_HAS(e, "PyTorch pickle");
    EXPECT_HAS(e, hint);
    EXPECT_EQ(e.find("not a safetensors file"), std::string::npos) << e;
    EXPECT_HAS(message_of([&] { LanguageModel::load(bytes); }), hint);
    EXPECT_HAS(message_of([&] { import_weights(bytes); }), hint);
  }
}

// A safetensors header of 640 bytes starts 0x80 0x02 too, as a pickle does: it still loads.
TEST(Import, SafetensorsWhoseLengthLooksLikeAPickleStillLoads) {
  std::vector<float> v(3, 1.f);
  std::vector<TensorRef> refs = {{"x", {3}, std::span<const float>(v)}};
  std::string pad(560, 'a');
  const auto bytes = serialize_safetensors(refs, {{"k", pad}});
  const auto f = parse_safetensors(bytes);
  EXPECT_EQ(f.floats("x"), v);
}

// detect_format tells the fixtures apart by their names alone.
TEST(Import, DetectsEachFormat) {
  for (const auto& [c, want] : std::vector<std::pair<std::string, std::string>>{{"seed000_encoder", "seed000"},
                                                                                {"seed002_transformer", "seed002"},
                                                                                {"seed003_classifier", "seed003"},
                                                                                {"seed004_transformer", "seed004"},
                                                                                {"torch_seq2seq_tutorial", "torch"},
                                                                                {"nanogpt_bias", "nanogpt"},
                                                                                {"nanogpt_nobias", "nanogpt"}})
    EXPECT_EQ(detect_format(io::read_file(fixture(c))), want) << c;
  LanguageModel lm({.vocab_size = 13, .context = 8, .d_model = 16, .heads = 4, .layers = 1});
  EXPECT_EQ(detect_format(lm.save()), "qkv");
}

}  // namespace
}  // namespace qkv::import_test

namespace qkv::import_test {
namespace {

// load_state and load take a foreign state dict too: its config is what its shapes and format fix (seed 004:
// everything, so load() builds the model), checked against the model's; what they cannot tell comes from it.
TEST(Import, LoadStateTakesAForeignStateDict) {
  const auto s4 = io::read_file(fixture("seed004_transformer"));
  const auto loaded = Seq2Seq::load(s4);
  EXPECT_EQ(loaded->config().heads, 4);
  EXPECT_FALSE(loaded->config().final_norm);
  Seq2Seq m(seed004_config());
  m.load_state(s4);
  const std::vector<int32_t> src = {1, 2, 3, 4}, tgt = {1, 5, 6};
  EXPECT_EQ(m.logits(src, tgt, 1, 4, 3), loaded->logits(src, tgt, 1, 4, 3));
  Seq2Seq other(seed004_config(2));
  EXPECT_HAS(message_of([&] { other.load_state(s4); }), "config field \"heads\" is 4 in the checkpoint but 2");

  const auto gpt = io::read_file(fixture("nanogpt_bias"));
  LanguageModelConfig c{.vocab_size = 13, .context = 10, .d_model = 16, .heads = 4, .layers = 2};
  LanguageModel lm(c);
  lm.load_state(gpt);
  LanguageModel via_weights(c);
  via_weights.load_weights(gpt);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  EXPECT_EQ(lm.logits(ids, 1, 5), via_weights.logits(ids, 1, 5));
  c.norm = NormPosition::Post;
  LanguageModel post(c);
  EXPECT_HAS(message_of([&] { post.load_state(gpt); }), "config field \"norm\" is \"pre\" in the checkpoint");
  // heads are not in a nanoGPT file: load() says which field is missing; and a state dict of another kind.
  EXPECT_HAS(message_of([&] { LanguageModel::load(gpt); }), "heads is missing");
  EXPECT_HAS(message_of([&] { lm.load_state(s4); }),
             "the file is a seed004 state dict of a seq2seq, expected a "
             "language_model");
}

}  // namespace
}  // namespace qkv::import_test

namespace qkv::import_test {
namespace {

// The tensors of `bytes` renamed by `rename` (an empty name drops the tensor).
std::vector<uint8_t> renamed(const std::vector<uint8_t>& bytes, std::string (*rename)(const std::string&)) {
  const auto f = parse_safetensors(bytes);
  std::vector<TensorRef> refs;
  std::vector<std::vector<float>> keep;
  keep.reserve(f.tensors.size());
  for (const auto& t : f.tensors) {
    const std::string n = rename(t.name);
    if (n.empty()) continue;
    keep.push_back(f.floats(t.name));
    refs.emplace_back(n, t.shape, std::span<const float>(keep.back()));
  }
  return serialize_safetensors(refs, {});
}

// nn.TransformerEncoder's names, with a "transformer." prefix (a GPT-style LM) or bare (under a Classifier's
// "encoder."), load as qkv's own.
TEST(Import, TransformerEncoderStateDictsWithAndWithoutPrefix) {
  LanguageModelConfig c{.vocab_size = 13, .context = 8, .d_model = 16, .heads = 4, .layers = 2, .seed = 5};
  LanguageModel a(c);
  c.seed = 6;
  LanguageModel b(c);
  const auto prefixed = renamed(a.save(false), [](const std::string& n) -> std::string {
    if (n.rfind("layers.", 0) == 0 || n.rfind("norm.", 0) == 0) return "transformer." + n;
    return n;
  });
  EXPECT_EQ(detect_format(prefixed), "torch");
  b.load_weights(prefixed);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(b.logits(ids, 1, 6), a.logits(ids, 1, 6));

  ClassifierConfig k{.vocab_size = 13, .context = 8, .d_model = 16, .heads = 4, .layers = 2, .classes = 3, .seed = 5};
  Classifier x(k);
  k.seed = 6;
  Classifier y(k);
  const auto bare = renamed(x.save(false), [](const std::string& n) -> std::string {
    if (n.rfind("encoder.", 0) == 0) return n.substr(8);  // nn.TransformerEncoder's own "layers.N", "norm"
    return n;
  });
  y.load_weights(bare);
  EXPECT_EQ(y.logits(ids, 1, 6), x.logits(ids, 1, 6));
  // A bare nn.Transformer-style file missing the embedding names it, in the qkv names it lacks.
  const auto no_emb = renamed(bare, [](const std::string& n) -> std::string {
    if (n == "tok_emb.weight") return {};
    return n;
  });
  EXPECT_HAS(message_of([&] { y.load_weights(no_emb); }), "tensor \"tok_emb.weight\" is missing");
}

}  // namespace
}  // namespace qkv::import_test
