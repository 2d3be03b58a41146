// The models learn tasks that need what they are built from: Seq2Seq reverses sequences (cross-attention),
// the Classifier decides whether token A comes before token B (self-attention over positions), the
// LanguageModel fits a small text. Held-out data, fixed seeds, stated thresholds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "qkv/tokenizer.h"
#include "runtime/random.h"

namespace qkv::learning_test {
namespace {

constexpr int kPad = 0, kBos = 1, kEos = 2, kFirstSymbol = 3, kSymbols = 10;

// A batch of reversal examples: src = symbols (padded), tgt = bos reversed eos (padded).
struct ReverseBatch {
  std::vector<int32_t> src, tgt_in, tgt_out;
  int B, S, T;
};

ReverseBatch reverse_batch(Rng& rng, int B, int max_len) {
  ReverseBatch r{{}, {}, {}, B, max_len, max_len + 1};
  r.src.assign(static_cast<size_t>(B) * r.S, kPad);
  r.tgt_in.assign(static_cast<size_t>(B) * r.T, kPad);
  r.tgt_out.assign(static_cast<size_t>(B) * r.T, kPad);
  for (int b = 0; b < B; ++b) {
    const int n = 3 + static_cast<int>(rng.next_u64() % static_cast<uint64_t>(max_len - 2));
    std::vector<int32_t> s(n);
    for (auto& x : s) x = kFirstSymbol + static_cast<int32_t>(rng.next_u64() % kSymbols);
    for (int i = 0; i < n; ++i) r.src[b * r.S + i] = s[i];
    r.tgt_in[b * r.T] = kBos;
    for (int i = 0; i < n; ++i) {
      r.tgt_in[b * r.T + 1 + i] = s[n - 1 - i];
      r.tgt_out[b * r.T + i] = s[n - 1 - i];
    }
    r.tgt_out[b * r.T + n] = kEos;
  }
  return r;
}

TEST(Learning, Seq2SeqReversesHeldOutSequences) {
  Seq2SeqConfig c{.src_vocab = kFirstSymbol + kSymbols,
                  .tgt_vocab = kFirstSymbol + kSymbols,
                  .context = 16,
                  .d_model = 64,
                  .heads = 4,
                  .encoder_layers = 2,
                  .decoder_layers = 2,
                  .d_ff = 128,
                  .seed = 3};
  c.norm = NormPosition::Pre;
  OptimizerConfig o;
  o.kind = OptimizerKind::Adam;
  o.lr = 1e-3f;
  o.beta2 = 0.98f;
  o.weight_decay = 0.f;
  o.schedule = Schedule::Cosine;
  o.warmup_steps = 50;
  o.total_steps = 900;
  o.min_lr = 1e-4f;
  Seq2Seq model(c, o);
  Rng train(1), held_out(2);
  const int max_len = 8;
  for (int step = 0; step < o.total_steps; ++step) {
    const auto b = reverse_batch(train, 32, max_len);
    model.train_step(b.src, b.tgt_in, b.tgt_out, b.B, b.S, b.T);
  }
  const auto test = reverse_batch(held_out, 200, max_len);
  const auto out = model.greedy(test.src, test.B, test.S, kBos, kEos, max_len + 1);
  int exact = 0;
  for (int b = 0; b < test.B; ++b) {
    bool ok = true;
    for (int t = 0; t < test.T && ok; ++t) {
      const int32_t want = test.tgt_out[b * test.T + t];
      ok = out[b * (max_len + 1) + t] == want;
      if (want == kEos) break;
    }
    exact += ok;
  }
  EXPECT_GE(exact, 198) << "exact matches out of 200 held-out sequences";  // >= 99%
}

// Sequences of 10 tokens after a [CLS] token, holding A and B once each at random places; the label says
// whether A comes first. Only attention across positions can tell.
TEST(Learning, ClassifierLearnsWhetherAComesBeforeB) {
  const int A = 3, Bt = 4, T = 11, V = 14;
  auto batch = [&](Rng& rng, int n, std::vector<int32_t>& tok, std::vector<int32_t>& lab) {
    tok.assign(static_cast<size_t>(n) * T, 0);
    lab.assign(static_cast<size_t>(n), 0);
    for (int b = 0; b < n; ++b) {
      tok[b * T] = kBos;  // the [CLS] position
      for (int t = 1; t < T; ++t) tok[b * T + t] = 5 + static_cast<int32_t>(rng.next_u64() % (V - 5));
      const int pa = 1 + static_cast<int>(rng.next_u64() % (T - 1));
      int pb = pa;
      while (pb == pa) pb = 1 + static_cast<int>(rng.next_u64() % (T - 1));
      tok[b * T + pa] = A;
      tok[b * T + pb] = Bt;
      lab[b] = pa < pb ? 1 : 0;
    }
  };
  ClassifierConfig c{
      .vocab_size = V, .context = T, .d_model = 32, .heads = 4, .layers = 2, .d_ff = 64, .classes = 2, .seed = 5};
  c.norm = NormPosition::Pre;
  c.positions = Positions::Learned;
  c.scale_embedding = false;
  OptimizerConfig o;
  o.lr = 1e-3f;
  o.weight_decay = 0.01f;
  Classifier model(c, o);
  Rng train(3), held_out(4);
  std::vector<int32_t> tok, lab;
  for (int step = 0; step < 1500; ++step) {
    batch(train, 32, tok, lab);
    model.train_step(tok, lab, 32, T);
  }
  batch(held_out, 500, tok, lab);
  const Metrics m = model.evaluate(tok, lab, 500, T);
  EXPECT_GE(m.accuracy, 0.95) << "held-out accuracy; loss " << m.loss;
}

TEST(Learning, LanguageModelFitsASmallText) {
  const std::string text =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
      "it was the season of Darkness. ";
  const Tokenizer tok = Tokenizer::char_level(text, SpecialTokens{false, false, false, false});
  const auto data = tok.encode(text);
  LanguageModelConfig c{.vocab_size = tok.size(), .context = 32, .d_model = 64, .heads = 4, .layers = 2, .seed = 9};
  OptimizerConfig o;
  o.lr = 3e-3f;
  LanguageModel lm(c, o);
  Rng rng(5);
  const int B = 16, T = 32;
  std::vector<int32_t> in(B * T), tg(B * T);
  auto sample = [&] {
    for (int b = 0; b < B; ++b) {
      const size_t start = rng.next_u64() % (data.size() - T - 1);
      for (int t = 0; t < T; ++t) {
        in[b * T + t] = data[start + t];
        tg[b * T + t] = data[start + t + 1];
      }
    }
  };
  float first = 0;
  for (int step = 0; step < 400; ++step) {
    sample();
    const float l = lm.train_step(in, tg, B, T);
    if (step == 0) first = l;
  }
  sample();
  const Metrics m = lm.evaluate(in, tg, B, T);
  EXPECT_GT(first, 2.5f);
  EXPECT_LT(m.loss, 0.3) << "first loss " << first;
  EXPECT_GT(m.accuracy, 0.9);
  EXPECT_NEAR(m.perplexity, std::exp(m.loss), 1e-9);
}

}  // namespace
}  // namespace qkv::learning_test
