// Activation recomputation (Model::set_recompute, nn/stack.h): a recomputing stack keeps each layer's input only and
// re-runs the layer's forward before its backward. Against the same model keeping every layer's activations, the
// losses, gradients and parameters after several steps are the same bit for bit (the same ops in the same order,
// dropout's masks replayed from the pass's seed: the model's dropout and the adapters' both on), for the three model
// kinds, pre-LN and post-LN, LoRA and full training; the attention maps too. The arena falls by exactly L - 1 layers'
// saved activations; Recompute::Auto is on with adapters only.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/lora.h"
#include "qkv/seq2seq.h"
#include "runtime/random.h"

namespace qkv::recompute_test {
namespace {

std::vector<int32_t> ids(size_t n, int V, uint64_t seed, int lowest = 0) {
  Rng rng(seed);
  std::vector<int32_t> out(n);
  for (auto& x : out) x = lowest + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V - lowest));
  return out;
}

// Rank 2 on every target with dropout on the adapters' input; B = 0 would leave dA zero, so the adapters get values.
void add_adapters(Model& m) {
  LoraOptions o;
  o.rank = 2;
  o.alpha = 3.f;
  o.dropout = 0.25f;
  o.targets = {"qkv", "out", "up", "down", "head"};
  o.seed = 9;
  m.add_lora(o);
  Rng rng(17);
  for (auto p : m.lora_parameters())
    for (float& x : p.value) x = 0.3f * static_cast<float>(rng.uniform() * 2.0 - 1.0);
}

std::vector<ParameterView> trained(Model& m, bool lora) { return lora ? m.lora_parameters() : m.parameters(); }

// Values and gradients of the trained parameters: equal bit for bit (EXPECT_EQ on floats).
void expect_identical(Model& kept, Model& recomputed, bool lora, const std::string& when) {
  const std::vector<ParameterView> a = trained(kept, lora), b = trained(recomputed, lora);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_STREQ(a[i].name, b[i].name);
    ASSERT_EQ(a[i].value.size(), b[i].value.size());
    for (size_t j = 0; j < a[i].value.size(); ++j) {
      ASSERT_EQ(a[i].value[j], b[i].value[j]) << when << " " << a[i].name << "[" << j << "]";
      ASSERT_EQ(a[i].grad[j], b[i].grad[j]) << when << " grad " << a[i].name << "[" << j << "]";
    }
  }
}

// The pair of models under test: `kept` with recomputation off, `recomputed` with it on (Auto with adapters).
template <class M>
struct Pair {
  std::unique_ptr<M> kept, recomputed;
  bool lora;
  template <class Config>
  Pair(const Config& c, bool with_lora) : kept(new M(c)), recomputed(new M(c)), lora(with_lora) {
    if (lora) {
      add_adapters(*kept);
      add_adapters(*recomputed);
      EXPECT_EQ(recomputed->recompute(), Recompute::Auto);  // on by default with adapters
    } else {
      recomputed->set_recompute(Recompute::On);
    }
    kept->set_recompute(Recompute::Off);
  }
};

struct Case {
  const char* name;
  NormPosition norm;
  Activation activation;
  bool lora;
};

class RecomputeLanguageModel : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeLanguageModel, StepsAreBitIdentical) {
  const Case& k = GetParam();
  LanguageModelConfig c;
  c.vocab_size = 29;
  c.context = 8;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 3;
  c.d_ff = 12;
  c.norm = k.norm;
  c.activation = k.activation;
  c.tie_head = false;
  c.dropout = 0.2f;
  c.seed = 5;
  Pair<LanguageModel> p(c, k.lora);
  const int B = 2, T = 7;
  for (int s = 0; s < 3; ++s) {
    const std::vector<int32_t> in = ids(B * T, c.vocab_size, 10 + s), tg = ids(B * T, c.vocab_size, 20 + s);
    const float a = p.kept->train_step(in, tg, B, T), b = p.recomputed->train_step(in, tg, B, T);
    ASSERT_EQ(a, b) << "train_step " << s;
    expect_identical(*p.kept, *p.recomputed, k.lora, "train_step " + std::to_string(s));
  }
  // Gradient accumulation: forward_backward, accumulate, then one step.
  const std::vector<int32_t> in = ids(B * T, c.vocab_size, 30), tg = ids(B * T, c.vocab_size, 31);
  ASSERT_EQ(p.kept->forward_backward(in, tg, B, T), p.recomputed->forward_backward(in, tg, B, T));
  ASSERT_EQ(p.kept->accumulate(tg, in, B, T, 0.5f), p.recomputed->accumulate(tg, in, B, T, 0.5f));
  expect_identical(*p.kept, *p.recomputed, k.lora, "accumulate");
  ASSERT_EQ(p.kept->apply_gradients(), p.recomputed->apply_gradients());
  expect_identical(*p.kept, *p.recomputed, k.lora, "apply_gradients");
  // The attention maps: after a training step the recomputing model has none (re-running a layer would read the
  // updated weights), and says so; after evaluate it runs each layer again on its kept input.
  for (int l = 0; l < c.layers; ++l) {
    EXPECT_FALSE(p.kept->attention(l).empty());
    try {
      p.recomputed->attention(l);
      ADD_FAILURE() << "no error after a training step, layer " << l;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("recomputes its activations"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(p.kept->evaluate(in, tg, B, T).loss, p.recomputed->evaluate(in, tg, B, T).loss);
  for (int l = c.layers - 1; l >= 0; --l)
    EXPECT_EQ(p.kept->attention(l), p.recomputed->attention(l)) << "after evaluate, layer " << l;
  // logits(), another full forward, gives them too.
  p.kept->logits(in, B, T);
  p.recomputed->logits(in, B, T);
  for (int l = 0; l < c.layers; ++l) EXPECT_EQ(p.kept->attention(l), p.recomputed->attention(l)) << "layer " << l;
  EXPECT_EQ(p.kept->generate(std::span(in).first(3), 4, 0.f, 1),
            p.recomputed->generate(std::span(in).first(3), 4, 0.f, 1));
}

INSTANTIATE_TEST_SUITE_P(Cases, RecomputeLanguageModel,
                         ::testing::Values(Case{"lora_pre_gelu", NormPosition::Pre, Activation::GELUTanh, true},
                                           Case{"lora_post_relu", NormPosition::Post, Activation::ReLU, true},
                                           Case{"full_pre_gelu", NormPosition::Pre, Activation::GELU, false},
                                           Case{"full_post_relu", NormPosition::Post, Activation::ReLU, false}),
                         [](const auto& info) { return std::string(info.param.name); });

class RecomputeClassifier : public ::testing::TestWithParam<Case> {};

// A padding mask (id 0 in the batch) and the classifier's head on top.
TEST_P(RecomputeClassifier, StepsAreBitIdentical) {
  const Case& k = GetParam();
  ClassifierConfig c;
  c.vocab_size = 23;
  c.context = 8;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 16;
  c.classes = 3;
  c.norm = k.norm;
  c.activation = k.activation;
  c.dropout = 0.2f;
  c.pooling = Pooling::Mean;
  c.head = ClassifierHead::MLP;
  Pair<Classifier> p(c, k.lora);
  const int B = 3, T = 6;
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> in = ids(B * T, c.vocab_size, 40 + s, 1);
    in[5] = in[11] = in[10] = 0;  // padding at the ends of rows 0 and 1
    const std::vector<int32_t> labels = ids(B, c.classes, 50 + s);
    ASSERT_EQ(p.kept->train_step(in, labels, B, T), p.recomputed->train_step(in, labels, B, T)) << "step " << s;
    expect_identical(*p.kept, *p.recomputed, k.lora, "train_step " + std::to_string(s));
    EXPECT_THROW(p.recomputed->attention(0), Error);  // none after a training step (RecomputeLanguageModel)
    EXPECT_EQ(p.kept->evaluate(in, labels, B, T).loss, p.recomputed->evaluate(in, labels, B, T).loss);
    for (int l = 0; l < c.layers; ++l) EXPECT_EQ(p.kept->attention(l), p.recomputed->attention(l)) << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RecomputeClassifier,
                         ::testing::Values(Case{"lora_post_relu", NormPosition::Post, Activation::ReLU, true},
                                           Case{"full_pre_gelu", NormPosition::Pre, Activation::GELU, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// The encoder recomputes (the decoder keeps its activations): the memory's gradient flows into it from every
// decoder layer's cross-attention.
TEST(RecomputeSeq2Seq, StepsAreBitIdentical) {
  for (const bool lora : {true, false}) {
    Seq2SeqConfig c;
    c.src_vocab = 19;
    c.tgt_vocab = 17;
    c.context = 8;
    c.d_model = 8;
    c.heads = 2;
    c.encoder_layers = 2;
    c.decoder_layers = 2;
    c.d_ff = 16;
    c.dropout = 0.2f;
    Pair<Seq2Seq> p(c, lora);
    const int B = 2, S = 6, T = 5;
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> src = ids(B * S, c.src_vocab, 60 + s, 1);
      src[5] = 0;
      const std::vector<int32_t> tin = ids(B * T, c.tgt_vocab, 70 + s, 1), tout = ids(B * T, c.tgt_vocab, 80 + s, 1);
      ASSERT_EQ(p.kept->train_step(src, tin, tout, B, S, T), p.recomputed->train_step(src, tin, tout, B, S, T))
          << (lora ? "lora" : "full") << " step " << s;
      expect_identical(*p.kept, *p.recomputed, lora,
                       std::string(lora ? "lora" : "full") + " step " + std::to_string(s));
      EXPECT_THROW(p.recomputed->attention(AttentionKind::EncoderSelf, 0), Error);
      EXPECT_EQ(p.kept->evaluate(src, tin, tout, B, S, T).loss, p.recomputed->evaluate(src, tin, tout, B, S, T).loss);
      for (int l = 0; l < c.encoder_layers; ++l)
        EXPECT_EQ(p.kept->attention(AttentionKind::EncoderSelf, l),
                  p.recomputed->attention(AttentionKind::EncoderSelf, l));
    }
  }
}

// The arena: a recomputing stack holds one layer's saved activations instead of L. For a pre-LN GELU layer of R rows
// those are q (R,C), k|v (R,2C), the attention output (R,C) and its log-sum-exp (R,H), the feed-forward's pre- and
// post-activation (R,F) each, LN(x1) (R,C), x1 (R,C) and the LN of the layer's input (R,C: recomputing, each layer
// normalises its own input), each rounded up to 16 floats (qkv/workspace.h); the layer's input stays per layer.
TEST(RecomputeMemory, ArenaFallsByAllButOneLayersActivations) {
  LanguageModelConfig c;
  c.vocab_size = 50;
  c.context = 16;
  c.d_model = 24;
  c.heads = 3;
  c.layers = 4;
  c.d_ff = 40;
  c.activation = Activation::GELU;
  const int B = 3, T = 13;
  const size_t R = static_cast<size_t>(B) * T, C = 24, H = 3, F = 40;
  const auto round = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t per_layer = sizeof(float) * (round(R * C) + round(R * 2 * C) + round(R * C) + round(R * H) +
                                            2 * round(R * F) + 3 * round(R * C));
  const std::vector<int32_t> in = ids(R, c.vocab_size, 1), tg = ids(R, c.vocab_size, 2);
  for (const bool lora : {false, true}) {
    LanguageModel kept(c), recomputed(c);
    if (lora) {
      add_adapters(kept);
      add_adapters(recomputed);
    } else {
      recomputed.set_recompute(Recompute::On);
    }
    kept.set_recompute(Recompute::Off);
    kept.train_step(in, tg, B, T);
    recomputed.train_step(in, tg, B, T);
    // With adapters, each layer's adapters' t = x A^T too (rank 2: qkv's two slots, out, up, down).
    const size_t adapters = lora ? sizeof(float) * 5 * round(R * 2) : 0;
    const size_t a = kept.memory().activations, b = recomputed.memory().activations;
    EXPECT_EQ(a - b, (c.layers - 1) * (per_layer + adapters)) << (lora ? "lora" : "full") << ": " << a << " -> " << b;
    // Switched on a model already planned: the arena is planned again, and shrinks.
    kept.set_recompute(lora ? Recompute::Auto : Recompute::On);
    kept.train_step(in, tg, B, T);
    EXPECT_EQ(kept.memory().activations, b);
  }
  // Without adapters Auto keeps every layer's activations.
  LanguageModel plain(c), off(c);
  off.set_recompute(Recompute::Off);
  plain.train_step(in, tg, B, T);
  off.train_step(in, tg, B, T);
  EXPECT_EQ(plain.recompute(), Recompute::Auto);
  EXPECT_EQ(plain.memory().activations, off.memory().activations);
}

// The arena of a 3-layer language model (C 16, 2 heads) after a training step of 2 x 8 rows, at a given d_ff (and
// dropout, norm position).
size_t arena_of(int F, Activation act, bool recompute, float dropout = 0.f, NormPosition norm = NormPosition::Pre) {
  LanguageModel lm(LanguageModelConfig{.vocab_size = 20,
                                       .context = 8,
                                       .d_model = 16,
                                       .heads = 2,
                                       .layers = 3,
                                       .d_ff = F,
                                       .activation = act,
                                       .norm = norm,
                                       .dropout = dropout});
  lm.set_recompute(recompute ? Recompute::On : Recompute::Off);
  lm.train_step(ids(16, 20, 3), ids(16, 20, 4), 2, 8);
  return lm.memory().activations;
}

// The feed-forward's share of the arena: per layer that keeps its activations, GELU's pre- and post-activation
// (R, F) and ReLU's output only (its pre-activation is scratch all layers share); the gradient of the activation
// output has no buffer of its own (nn/feed_forward.cpp: it is written over one the backward is done with). Read
// as the arena's growth when F grows by dF (from 3C, so that the layer's scratch is in its buffers at both widths:
// below), every other buffer staying the same size: kept, 2 L R dF floats (GELU)
// and (L + 1) R dF (ReLU); recomputing, 2 R dF either way (the shared h and a). That the gradients stay right is the
// other tests' part (the steps above, the gradient checks, the PyTorch parity); here a third (R, F) would show.
TEST(RecomputeMemory, TheFeedForwardGradientHasNoBufferOfItsOwn) {
  const size_t R = 16, L = 3, dF = 32;
  for (const Activation act : {Activation::GELU, Activation::ReLU}) {
    for (const bool recompute : {false, true}) {
      const bool gelu = act == Activation::GELU;
      const size_t buffers = recompute ? 2 : gelu ? 2 * L : L + 1;
      EXPECT_EQ(arena_of(48 + dF, act, recompute) - arena_of(48, act, recompute), sizeof(float) * buffers * R * dF)
          << (gelu ? "GELU" : "ReLU") << (recompute ? ", recomputing" : ", kept");
    }
  }
}

// The attention's backward scratch (dq and dy (R, C), dkv (R, 2C)) lives in its layer's feed-forward buffers, dead by
// the time it runs, when they hold it (F >= 2C; nn/attention.h): from F = C to F = 2C the arena grows by the
// feed-forward's buffers and sheds the 4 R C floats of scratch it held beside them.
TEST(RecomputeMemory, TheAttentionBackwardScratchLivesInTheFeedForwardBuffers) {
  const size_t R = 16, L = 3, C = 16;
  for (const bool recompute : {false, true}) {
    const size_t buffers = recompute ? 2 : 2 * L;
    const size_t narrow = arena_of(16, Activation::GELU, recompute), wide = arena_of(32, Activation::GELU, recompute);
    EXPECT_EQ(wide + sizeof(float) * 4 * R * C, narrow + sizeof(float) * buffers * R * C)
        << (recompute ? "recomputing" : "kept");
  }
}

// The rest of a layer's backward scratch (each residual block's dn and the layer's dx1, (R, C) each) lives there too
// when the feed-forward's buffers hold 3 R C (F >= 3C; nn/transformer_layer.cpp): from F = 2C to F = 3C the arena
// grows by the feed-forward's buffers and sheds 2 R C floats (the shared dn and dx1).
TEST(RecomputeMemory, TheLayerBackwardScratchLivesInTheFeedForwardBuffers) {
  const size_t R = 16, L = 3, C = 16;
  for (const Activation act : {Activation::GELU, Activation::ReLU}) {
    for (const bool recompute : {false, true}) {
      const bool gelu = act == Activation::GELU;
      const size_t buffers = recompute ? 2 : gelu ? 2 * L : L + 1;
      EXPECT_EQ(arena_of(48, act, recompute) + sizeof(float) * 2 * R * C,
                arena_of(32, act, recompute) + sizeof(float) * buffers * R * C)
          << (gelu ? "GELU" : "ReLU") << (recompute ? ", recomputing" : ", kept");
    }
  }
}

// Pre-LN, a residual block needs scratch for dropout's gradient only when the model has dropout (post-LN it holds
// LN'(dout) either way): with p = 0 the arena has no (R, C) for it (nn/residual.cpp).
TEST(RecomputeMemory, PreLnBlocksKeepNoDropoutScratchWithoutDropout) {
  const size_t R = 16, C = 16;
  for (const bool recompute : {false, true}) {
    EXPECT_EQ(arena_of(64, Activation::GELU, recompute, 0.1f) - arena_of(64, Activation::GELU, recompute),
              sizeof(float) * R * C)
        << (recompute ? "recomputing" : "kept");
    EXPECT_EQ(arena_of(64, Activation::GELU, recompute, 0.1f, NormPosition::Post),
              arena_of(64, Activation::GELU, recompute, 0.f, NormPosition::Post))
        << (recompute ? "recomputing" : "kept") << ", post-LN";
  }
}

// The stack's final norm writes its backward (d of its input) over its own output, which the head has read by then
// (nn/stack.cpp): a model with the norm holds its mean and rstd (R each) but no second (R, C) for that gradient, so
// its arena is R C - 2 R floats smaller than the same model's without the norm.
TEST(RecomputeMemory, TheFinalNormsGradientIsWrittenOverItsOutput) {
  const size_t R = 16, C = 16;
  for (const bool recompute : {false, true}) {
    size_t arena[2] = {0, 0};
    for (const bool final_norm : {false, true}) {
      LanguageModel lm(LanguageModelConfig{
          .vocab_size = 20, .context = 8, .d_model = 16, .heads = 2, .layers = 3, .final_norm = final_norm});
      lm.set_recompute(recompute ? Recompute::On : Recompute::Off);
      lm.train_step(ids(16, 20, 3), ids(16, 20, 4), 2, 8);
      arena[final_norm] = lm.memory().activations;
    }
    EXPECT_EQ(arena[0] - arena[1], sizeof(float) * (R * C - 2 * R)) << (recompute ? "recomputing" : "kept");
  }
}

}  // namespace
}  // namespace qkv::recompute_test
