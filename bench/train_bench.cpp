// Training throughput of qkv's reference configurations, one configuration per process so that the peak
// resident memory is this model's alone. bench/train_torch.py is the PyTorch side; bench/run_cpu.sh runs both
// and bench/cpu_report.py reads the RESULT lines each prints:
//   RESULT bench=<name> side=qkv threads=<n> ... ms_per_step=<mean> tokens_per_s=<n> peak_rss_mib=<MiB>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "char_gpt_recipe.h"
#include "qkv/qkv.h"
#include "qkv/seq2seq.h"
#include "runtime/random.h"

namespace qkv::bench {
namespace {

// n token ids, uniform in [lo, hi), from a fixed seed.
std::vector<int32_t> random_tokens(size_t n, int lo, int hi, uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = int32_t(lo + int64_t(rng.next_u64() % uint64_t(hi - lo)));
  return t;
}

struct StepTimes {
  double mean_ms = 0, median_ms = 0;
};

// Runs `warmup` untimed steps, then times `steps` steps one by one. step(i) runs the i-th step.
template <class Step>
StepTimes time_steps(int warmup, int steps, Step&& step) {
  for (int i = 0; i < warmup; ++i) step(i);
  std::vector<double> ms(size_t(std::max(steps, 1)));
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    const Timer t;
    step(warmup + i);
    ms[size_t(i)] = 1e3 * t.seconds();
    total += ms[size_t(i)];
  }
  std::sort(ms.begin(), ms.end());
  return {total / std::max(steps, 1), ms[ms.size() / 2]};
}

void print_result(const char* bench, const std::string& extra, int threads, int steps, const StepTimes& t,
                  double tokens_per_step) {
  const double tokens_per_s = tokens_per_step / (t.mean_ms / 1e3), rss = peak_rss_mib();
  std::printf("%-10s %-8s %8s %10s %12s %14s\n", "side", "threads", "ms/step", "median ms", "tokens/s", "peak RSS MiB");
  std::printf("%-10s %-8d %8.2f %10.2f %12.0f %14.1f\n", "qkv", threads, t.mean_ms, t.median_ms, tokens_per_s, rss);
  std::printf(
      "RESULT bench=%s side=qkv threads=%d isa=%s %s steps=%d ms_per_step=%.3f median_ms=%.3f "
      "tokens_per_s=%.1f peak_rss_mib=%.1f load=\"%s\"\n",
      bench, threads, qkv::active_isa().c_str(), extra.c_str(), steps, t.mean_ms, t.median_ms, tokens_per_s, rss,
      load_average().c_str());
}

}  // namespace

// nanoGPT's CPU char config: V 65, context 64, 4 layers, 4 heads, 128 wide, batch 12 x 64 tokens.
// config "recipe": char_gpt_recipe.h (what the PyTorch twin runs); "package": what the npm package builds
// from { vocabSize: 65, context: 64, dModel: 128, heads: 4, layers: 4 } (qkv's defaults: biases on, AdamW
// at a constant lr), the configuration the WebAssembly benchmark trains.
int run_char_gpt(const Options& o) {
  constexpr int kVocab = 65, kPool = 16;  // random batches, cycled
  const int B = o.batch > 0 ? o.batch : kCharBatch, T = kCharContext;
  const int steps = o.steps > 0 ? o.steps : 200, warmup = o.warmup >= 0 ? o.warmup : 10;
  qkv::set_num_threads(o.threads);
  if (!o.isa.empty()) qkv::force_isa(o.isa);
  const bool recipe = o.config == "recipe";
  if (!recipe && o.config != "package") {
    std::fprintf(stderr, "--config must be recipe or package, got %s\n", o.config.c_str());
    return 2;
  }
  LanguageModelConfig cfg{.vocab_size = kVocab, .context = T, .d_model = 128, .heads = 4, .layers = 4};
  OptimizerConfig opt;
  if (recipe) {
    cfg = char_gpt_config(kVocab);
    opt = char_gpt_optimizer();
  }
  LanguageModel lm(cfg, opt);

  const size_t n = size_t(B) * T;
  const std::vector<int32_t> inputs = random_tokens(kPool * n, 0, kVocab, 1),
                             targets = random_tokens(kPool * n, 0, kVocab, 2);
  std::printf(
      "\n== qkv char GPT training step (%s config), B %d x T %d, %d threads, %s; %d warm-up + %d timed "
      "steps; load average %s\n",
      o.config.c_str(), B, T, qkv::num_threads(), qkv::active_isa().c_str(), warmup, steps, load_average().c_str());
  const StepTimes t = time_steps(warmup, steps, [&](int i) {
    const size_t at = size_t(i % kPool) * n;
    lm.train_step(std::span(inputs).subspan(at, n), std::span(targets).subspan(at, n), B, T);
  });
  print_result("char-gpt", "config=" + o.config + " batch=" + std::to_string(B) + " seq=" + std::to_string(T),
               qkv::num_threads(), steps, t, double(n));
  return 0;
}

// The PyTorch translation tutorial's encoder-decoder: vocab 5000 both sides, d_model 512, 8 heads, 6+6 post-LN
// layers, d_ff 2048, ReLU, sinusoidal positions, embeddings x sqrt(d_model); dropout 0 for timing; Adam lr 1e-4,
// betas (0.9, 0.98), eps 1e-9, no weight decay, no clipping. Batch 64, source and target length 100, no padding:
// tokens/s counts target tokens (batch x 100 per step).
int run_seq2seq(const Options& o) {
  constexpr int kVocab = 5000, kLen = 100;
  const int B = o.batch > 0 ? o.batch : 64;
  const int steps = o.steps > 0 ? o.steps : 5, warmup = o.warmup >= 0 ? o.warmup : 2;
  qkv::set_num_threads(o.threads);
  if (!o.isa.empty()) qkv::force_isa(o.isa);
  Seq2SeqConfig cfg{.src_vocab = kVocab,
                    .tgt_vocab = kVocab,
                    .context = kLen,
                    .d_model = 512,
                    .heads = 8,
                    .encoder_layers = 6,
                    .decoder_layers = 6,
                    .d_ff = 2048};
  cfg.activation = Activation::ReLU;
  cfg.norm = NormPosition::Post;
  cfg.dropout = 0.f;
  cfg.positions = Positions::Sinusoidal;
  cfg.scale_embedding = true;
  cfg.final_norm = true;
  OptimizerConfig opt;
  opt.kind = OptimizerKind::Adam;
  opt.lr = 1e-4f;
  opt.beta1 = 0.9f;
  opt.beta2 = 0.98f;
  opt.eps = 1e-9f;
  opt.weight_decay = 0.f;
  opt.grad_clip = 0.f;
  opt.schedule = Schedule::Constant;
  Seq2Seq model(cfg, opt);

  const size_t n = size_t(B) * kLen;  // ids in [1, V): pad id 0 never occurs
  const std::vector<int32_t> src = random_tokens(n, 1, kVocab, 1), tgt_in = random_tokens(n, 1, kVocab, 2),
                             tgt_out = random_tokens(n, 1, kVocab, 3);
  std::printf(
      "\n== qkv Seq2Seq training step (tutorial), B %d, source and target length %d, %d threads, %s; %d "
      "warm-up + %d timed steps; %zu parameters; load average %s\n",
      B, kLen, qkv::num_threads(), qkv::active_isa().c_str(), warmup, steps, model.num_parameters(),
      load_average().c_str());
  const StepTimes t = time_steps(warmup, steps, [&](int) { model.train_step(src, tgt_in, tgt_out, B, kLen, kLen); });
  print_result("seq2seq", "batch=" + std::to_string(B) + " seq=" + std::to_string(kLen), qkv::num_threads(), steps, t,
               double(n));
  return 0;
}

}  // namespace qkv::bench
