// Prints, as JSON, the loss trajectory of a small LanguageModel trained on a fixed batch, and a greedy
// sample. tests/web/native-parity.test.ts runs the same through the WebAssembly build and compares:
// the same core on two targets must follow the same trajectory (to float32 rounding; native kernels
// use FMA, SIMD128 has none).
#include <cstdio>
#include <vector>

#include "qkv/qkv.h"

int main() {
  const qkv::LanguageModelConfig cfg{
      .vocab_size = 11, .context = 12, .d_model = 24, .heads = 3, .layers = 2, .d_ff = 40, .seed = 7};
  qkv::OptimizerConfig opt;
  opt.lr = 2e-3f;
  const int B = 3, T = 12, steps = 20;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = (i * 5 + i / 7) % 11;
    tg[i] = (i * 3 + 1) % 11;
  }
  qkv::LanguageModel lm(cfg, opt);
  std::printf(
      "{\n  \"config\": {\"vocabSize\": 11, \"context\": 12, \"dModel\": 24, \"heads\": 3, \"layers\": 2, "
      "\"dFF\": 40, \"seed\": 7, \"lr\": 0.002},\n");
  std::printf("  \"batch\": %d, \"seq\": %d,\n  \"inputs\": [", B, T);
  for (int i = 0; i < B * T; ++i) std::printf("%s%d", i ? ", " : "", in[i]);
  std::printf("],\n  \"targets\": [");
  for (int i = 0; i < B * T; ++i) std::printf("%s%d", i ? ", " : "", tg[i]);
  std::printf("],\n  \"losses\": [");
  for (int s = 0; s < steps; ++s) std::printf("%s%.9g", s ? ", " : "", lm.train_step(in, tg, B, T));
  const std::vector<int32_t> prompt = {1, 2, 3};
  const auto out = lm.generate(prompt, 8, 0.f, 1);
  std::printf("],\n  \"prompt\": [1, 2, 3],\n  \"greedy\": [");
  for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? ", " : "", out[i]);
  std::printf("]\n}\n");
}
