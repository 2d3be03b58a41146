#pragma once
// The small models and batches the device tests share (models/device_test.cpp on CUDA, ops/webgpu_backend_test.cpp
// on the WebGPU stream): each judged against a CPU twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"

namespace qkv::test {

inline constexpr double kLogitTol = 1e-5, kLossTol = 1e-4;

inline LanguageModelConfig lm_config() {
  LanguageModelConfig c{.vocab_size = 17, .context = 12, .d_model = 32, .heads = 4, .layers = 2, .d_ff = 48};
  c.seed = 7;
  return c;
}

inline Seq2SeqConfig seq2seq_config() {
  Seq2SeqConfig c{.src_vocab = 13,
                  .tgt_vocab = 15,
                  .context = 12,
                  .d_model = 32,
                  .heads = 4,
                  .encoder_layers = 2,
                  .decoder_layers = 2,
                  .d_ff = 48};
  c.norm = NormPosition::Post;
  c.activation = Activation::ReLU;
  c.positions = Positions::Sinusoidal;
  c.scale_embedding = true;
  c.label_smoothing = 0.1f;
  return c;
}

inline ClassifierConfig classifier_config(Pooling pooling) {
  ClassifierConfig c{.vocab_size = 19, .context = 10, .d_model = 32, .heads = 4, .layers = 2, .d_ff = 48, .classes = 3};
  c.pooling = pooling;
  c.head = pooling == Pooling::First ? ClassifierHead::MLP : ClassifierHead::Linear;
  return c;
}

// Ids in [1, V) from a fixed seed (0 stays free as the padding id), with the last `pad` of each row padding.
inline std::vector<int32_t> ids(int B, int T, int V, uint64_t seed, int pad = 0) {
  std::vector<int32_t> out(static_cast<size_t>(B) * T);
  uint64_t s = seed * 2654435761u + 1;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      out[static_cast<size_t>(b) * T + t] =
          t >= T - pad && b % 2 == 1 ? 0 : 1 + static_cast<int32_t>((s >> 33) % (V - 1));
    }
  return out;
}

inline void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what,
                            const char* device = "cuda") {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]) / std::max(1.0, std::abs(double(want[i])));
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d, at = i;  // a NaN is the worst of all
  }
  EXPECT_LE(worst, tol) << what << "[" << at << "]: " << device << " " << got[at] << ", want " << want[at];
}

// |got - want| <= tol * max_i |want_i|, element by element: a bound on the rounding of a reduced precision, whose
// error scales with the outputs' magnitude (expect_near_all's max(1, |want|) would make it absolute for small
// logits, and so loose). A NaN or a size that differs fails.
inline void expect_near_scaled(const std::vector<float>& got, const std::vector<float>& want, double tol,
                               const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  ASSERT_GT(scale, 0) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(static_cast<double>(got[i]) - want[i]), tol * scale)
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (largest |want| " << scale << ")";
}

}  // namespace qkv::test
