#pragma once
// The configs of the PyTorch parity fixtures that more than one test builds a model on (models_parity_test, and
// lora_parity_test, whose adapters sit on these bases): each must match tests/fixtures/make_fixtures.py's model.
#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"

namespace qkv::test {

// lm_gpt (exact GELU) and lm_gpt_tanh (GELU's tanh form): pre-LN, learned positions, tied head.
inline LanguageModelConfig lm_gpt_config(Activation activation = Activation::GELU) {
  LanguageModelConfig c{.vocab_size = 13, .context = 10, .d_model = 32, .heads = 4, .layers = 2, .d_ff = 64};
  c.activation = activation;
  c.norm = NormPosition::Pre;
  c.positions = Positions::Learned;
  c.tie_head = true;
  return c;
}

// seq2seq: the translation tutorial's nn.Transformer (post-LN, sinusoidal positions, scaled embedding, smoothing).
inline Seq2SeqConfig seq2seq_tutorial_config() {
  Seq2SeqConfig c{.src_vocab = 11,
                  .tgt_vocab = 12,
                  .context = 16,
                  .d_model = 32,
                  .heads = 4,
                  .encoder_layers = 2,
                  .decoder_layers = 2,
                  .d_ff = 48};
  c.activation = Activation::ReLU;
  c.norm = NormPosition::Post;
  c.positions = Positions::Sinusoidal;
  c.scale_embedding = true;
  c.pad_id = 0;
  c.label_smoothing = 0.1f;
  return c;
}

// classifier_mean_linear: pre-LN, learned positions, mean pooling, one Linear head.
inline ClassifierConfig classifier_mean_linear_config() {
  ClassifierConfig c{.vocab_size = 20, .context = 12, .d_model = 16, .heads = 4, .layers = 2, .d_ff = 32, .classes = 3};
  c.activation = Activation::GELU;
  c.norm = NormPosition::Pre;
  c.positions = Positions::Learned;
  c.scale_embedding = false;
  c.pooling = Pooling::Mean;
  c.head = ClassifierHead::Linear;
  return c;
}

}  // namespace qkv::test
