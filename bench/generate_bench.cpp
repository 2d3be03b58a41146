// Generation throughput: tokens/s generating 256 tokens at batch 1 after a one-token prompt, with the KV cache
// and without it (every token re-runs the window, as nanoGPT's `generate` does), on nanoGPT's char GPT (V 65,
// 4 pre-LN layers, 4 heads, 128 wide) with a context of 256. bench/generate_torch.py is the PyTorch side and
// bench/wasm_generate.mjs the WebAssembly one; bench/run_generate.sh runs all three. Prints a table and
//   RESULT bench=generate side=qkv cache=<on|off> threads=<n> ... ms_per_run=<median> tokens_per_s=<n>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "char_gpt_recipe.h"
#include "qkv/qkv.h"

namespace qkv::bench {

int run_generate(const Options& o) {
  constexpr int kVocab = 65, kContext = 256, kTokens = 256;
  qkv::set_num_threads(o.threads);
  if (!o.isa.empty()) qkv::force_isa(o.isa);
  LanguageModelConfig cfg = char_gpt_config(kVocab);
  cfg.context = kContext;
  LanguageModel lm(cfg);
  lm.set_training(false);
  const std::vector<int32_t> prompt = {0};
  std::printf(
      "\n== qkv generation: %d tokens at batch 1 after a 1-token prompt, char GPT (V %d, 4 layers, 4 heads, 128 "
      "wide, context %d), temperature 1; %d threads, %s; load average %s\n",
      kTokens, kVocab, kContext, qkv::num_threads(), qkv::active_isa().c_str(), load_average().c_str());
  std::printf("%-8s %-8s %10s %10s %12s\n", "side", "cache", "runs", "median ms", "tokens/s");
  double per_s[2] = {0, 0};
  for (int cached = 1; cached >= 0; --cached) {
    SamplingOptions s;
    s.max_new_tokens = kTokens;
    s.temperature = 1.f;
    s.use_cache = cached == 1;
    // The cached run takes milliseconds, the uncached one a second or more: fewer runs of the slow one.
    const int runs = o.steps > 0 ? o.steps : (cached ? 20 : 5), warmup = o.warmup >= 0 ? o.warmup : 1;
    std::vector<double> ms;
    for (int r = 0; r < warmup + runs; ++r) {
      s.seed = static_cast<uint64_t>(r);
      const Timer t;
      const std::vector<int32_t> out = lm.generate(prompt, s);
      const double elapsed = 1e3 * t.seconds();
      keep(static_cast<float>(out.size()));
      if (out.size() != size_t(kTokens)) {
        std::fprintf(stderr, "generate made %zu tokens, expected %d\n", out.size(), kTokens);
        return 1;
      }
      if (r >= warmup) ms.push_back(elapsed);
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2], tokens_per_s = kTokens / (median / 1e3);
    per_s[cached] = tokens_per_s;
    std::printf("%-8s %-8s %10d %10.2f %12.0f\n", "qkv", cached ? "on" : "off", runs, median, tokens_per_s);
    std::printf(
        "RESULT bench=generate side=qkv cache=%s threads=%d isa=%s tokens=%d context=%d runs=%d ms_per_run=%.3f "
        "tokens_per_s=%.1f load=\"%s\"\n",
        cached ? "on" : "off", qkv::num_threads(), qkv::active_isa().c_str(), kTokens, kContext, runs, median,
        tokens_per_s, load_average().c_str());
  }
  std::printf("qkv cache speed-up: %.1fx (target >= 10x)\n", per_s[1] / per_s[0]);
  return 0;
}

}  // namespace qkv::bench
