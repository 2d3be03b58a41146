// LoRA training against full fine-tuning on GPT-2 124M's shape (issue 37, "Speed and memory"): bench/lora.py is the
// PyTorch side, bench/lora_node.mjs the WebAssembly one, bench/run_lora.sh runs them all and bench/lora_report.py
// prints the table. One mode per process, so that the peak resident memory is that mode's alone:
//   full     every weight trains (gradients and Adam moments for all 124M parameters)
//   lora     rank 8, alpha 16 on qkv, out, up and down in every layer (PEFT's targets for GPT-2's c_attn,
//            attn.c_proj, mlp.c_fc, mlp.c_proj), the float32 base frozen
//   lora-q4  the same on a base quantized to q4 (Model::quantize: the matrices and the tied embedding packed)
// Before the steps, the peak loop (peak.h) at the same thread count: the step's model FLOP over it is "% of peak".
// Memory: the process's peak RSS, which for lora-q4 is the float32 model built before it is quantized, and the
// training phase's own peak ("step peak": the resident high-water mark started over once the model is ready).
// --recompute auto|on|off: Model::set_recompute (auto: on with the adapters); --accumulate: each step as
// forward_backward + apply_gradients (the checked order, where a head that trains runs twice) instead of train_step.
//
// Model FLOP of a step (nanoGPT's estimate_mfu count, per token; N the matrix weights 12 L C^2 + V C with the tied
// head, attention 12 L T C for its forward and backward, causal positions counted whole):
//   full  6 N + 12 L T C                 forward 2N, the input gradients 2N, the weight gradients 2N
//   lora  4 N + 12 L T C + 6 N_adapters  no weight gradients of the frozen base; the adapters' products all three
#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "peak.h"
#include "qkv/qkv.h"
#include "runtime/random.h"

namespace qkv::bench {
namespace {

constexpr int kVocab = 50257, kContext = 1024, kWidth = 768, kHeads = 12, kLayers = 12, kRank = 8;

// Parameters of one layer's adapters: rank (in + out) for qkv (C -> 3C), out (C -> C), up (C -> 4C), down (4C -> C).
double adapter_params_per_layer(int C) { return double(kRank) * ((C + 3 * C) + (C + C) + 2 * (C + 4 * C)); }

double step_flop(bool lora, int L, int C, int V, int B, int T) {
  const double n = 12.0 * L * C * C + double(V) * C, attention = 12.0 * L * T * C;
  const double per_token = lora ? 4 * n + attention + 6 * L * adapter_params_per_layer(C) : 6 * n + attention;
  return per_token * B * T;
}

}  // namespace

int run_lora(const Options& o) {
  const std::string& mode = o.mode;
  if (mode != "lora" && mode != "full" && mode != "lora-q4") {
    std::fprintf(stderr, "--mode must be lora, full or lora-q4, got %s\n", mode.c_str());
    return 2;
  }
  const bool lora = mode != "full";
  const int B = o.batch > 0 ? o.batch : 8, T = 128, L = o.layers > 0 ? o.layers : kLayers;
  const int steps = o.steps > 0 ? o.steps : 3, warmup = o.warmup >= 0 ? o.warmup : 1;
  qkv::set_num_threads(o.threads);
  if (!o.isa.empty()) qkv::force_isa(o.isa);
  const std::vector<PeakRow> peak = measure_peak(o.threads, o.quick);
  const double peak_gflops = peak_of(peak, qkv::active_isa(), o.threads);

  LanguageModelConfig cfg{.vocab_size = kVocab, .context = kContext, .d_model = kWidth, .heads = kHeads, .layers = L};
  cfg.activation = Activation::GELUTanh;
  LanguageModel lm(cfg);  // qkv's default AdamW (lr 1e-3, betas (0.9, 0.99), decay 0.1 on matrices, clip 1.0)
  const double base_mib = double(lm.memory().parameters) / (1 << 20);
  if (mode == "lora-q4") lm.quantize(WeightFormat::Q4);
  if (lora) {
    LoraOptions lo;
    lo.rank = kRank;
    lo.alpha = 16.f;
    lo.targets = {"qkv", "out", "up", "down"};
    lm.add_lora(lo);
  }
  if (o.recompute == "on")
    lm.set_recompute(Recompute::On);
  else if (o.recompute == "off")
    lm.set_recompute(Recompute::Off);
  else if (o.recompute != "auto") {
    std::fprintf(stderr, "--recompute must be auto, on or off, got %s\n", o.recompute.c_str());
    return 2;
  }
  size_t trainable = 0;
  for (const auto& p : lora ? lm.lora_parameters() : lm.parameters()) trainable += p.value.size();

  constexpr int kPool = 4;  // random batches, cycled
  const size_t n = size_t(B) * T;
  Rng rng(1);
  std::vector<int32_t> inputs(kPool * n), targets(kPool * n);
  for (auto& t : inputs) t = int32_t(rng.next_u64() % kVocab);
  for (auto& t : targets) t = int32_t(rng.next_u64() % kVocab);
  const char* recompute = lm.recompute() == Recompute::On ? "on" : lm.recompute() == Recompute::Off ? "off" : "auto";
  std::printf(
      "\n== qkv GPT-2 124M shape (%d layers) training step, %s, B %d x T %d, %d threads, %s; trainable %zu; %d "
      "warm-up + %d timed steps; recompute %s; %s; load average %s\n",
      L, mode.c_str(), B, T, qkv::num_threads(), qkv::active_isa().c_str(), trainable, warmup, steps, recompute,
      o.accumulate ? "forward_backward + apply_gradients" : "train_step", load_average().c_str());
  const auto step = [&](size_t at) {
    const std::span<const int32_t> in = std::span(inputs).subspan(at, n), tg = std::span(targets).subspan(at, n);
    if (!o.accumulate) return static_cast<void>(lm.train_step(in, tg, B, T));
    lm.forward_backward(in, tg, B, T);
    lm.apply_gradients();
  };
  const double setup_rss = peak_rss_mib();  // the model built (and quantized), before any step
  const bool reset = reset_peak_rss();
  for (int i = 0; i < warmup; ++i) step(size_t(i % kPool) * n);
  const Timer timer;
  for (int i = 0; i < steps; ++i) step(size_t((warmup + i) % kPool) * n);
  const double ms = 1e3 * timer.seconds() / steps, tokens_per_s = double(n) / (ms / 1e3);
  const double gflops = step_flop(lora, L, kWidth, kVocab, B, T) / (ms / 1e3) * 1e-9;
  const double step_rss = reset ? peak_rss_since_reset_mib() : -1,
               rss = std::max({setup_rss, step_rss, peak_rss_mib()});
  const double pct = peak_gflops > 0 ? 100 * gflops / peak_gflops : 0;
  std::printf("%-6s %-8s %-8s %10s %10s %9s %9s %7s %13s %10s %13s %10s\n", "side", "mode", "threads", "ms/step",
              "tokens/s", "GFLOP/s", "peak", "% peak", "peak RSS MiB", "x weights", "step peak MiB", "x weights");
  std::printf("%-6s %-8s %-8d %10.1f %10.1f %9.1f %9.1f %7.1f %13.1f %10.2f %13.1f %10.2f\n", "qkv", mode.c_str(),
              qkv::num_threads(), ms, tokens_per_s, gflops, peak_gflops, pct, rss, rss / base_mib, step_rss,
              step_rss / base_mib);
  // Where the step peak goes: the model's own accounting (qkv/memory.h); the rest of the resident set is the
  // process (libraries, the thread pool) and the CPU gemm's per-thread packing buffers.
  const MemoryUsage mem = lm.memory();
  const auto mib = [](size_t bytes) { return double(bytes) / (1 << 20); };
  std::printf("memory() MiB: parameters %.1f, gradients %.1f, optimizer %.1f, activations (arena) %.1f\n",
              mib(mem.parameters), mib(mem.gradients), mib(mem.optimizer), mib(mem.activations));
  std::printf(
      "RESULT bench=lora side=qkv mode=%s threads=%d isa=%s layers=%d batch=%d seq=%d rank=%d trainable=%zu "
      "base_mib=%.1f steps=%d ms_per_step=%.3f tokens_per_s=%.2f gflops=%.2f peak_gflops=%.2f peak_rss_mib=%.1f "
      "step_peak_rss_mib=%.1f recompute=%s accumulate=%d load=\"%s\"\n",
      mode.c_str(), qkv::num_threads(), qkv::active_isa().c_str(), L, B, T, kRank, trainable, base_mib, steps, ms,
      tokens_per_s, gflops, peak_gflops, rss, step_rss, recompute, o.accumulate ? 1 : 0, load_average().c_str());
  return 0;
}

}  // namespace qkv::bench
