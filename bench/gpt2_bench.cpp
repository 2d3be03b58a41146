// GPT-2 124M generation natively (issue 35, "Speed and memory"; bench/run_gpt2.sh runs it beside
// onnxruntime-node, onnxruntime-web and the package in Node): batch 1, a prompt of --prompt ids, --new greedy
// tokens with the KV cache, --runs generations after one load, in this fresh process.
//
//   qkv_gpt2_bench pretrained DIR [options]   load_pretrained(DIR): a Hugging Face folder (bench/gpt2_export.py)
//   qkv_gpt2_bench file CKPT [options]        LanguageModel::load_file(CKPT): that folder after `qkv import`
//   qkv_gpt2_bench bandwidth [--threads N]    the streaming read bandwidth at N threads (read_bandwidth.h): a
//                                             1 GiB buffer, the best of 10 passes; RESULT side=bandwidth gbs=<GB/s>
//   options: --threads N (2) --prompt N (32) --new N (64) --runs N (3) --isa NAME (force_isa; default the best)
//            --label SIDE (RESULT's side=, default the mode)
//            --bandwidth-mb N: after the generations (and the peak RSS read), the streaming read bandwidth over N MiB
//            at the same threads (read_bandwidth.h), RESULT's gbs= (0 without it): the floor of this process
//
// Each generation is start_generation + next() per token: the first next() runs the prompt through every layer
// and picks the first token ("prefill", with that first token as every side counts it), each later next() is one
// decode step (one position against the cache, the logits, the argmax). Prints per run, then one line:
//   RESULT side=<pretrained|file> threads=<n> load_s=<s> prefill_ms=<best run's> first_prefill_ms=<run 0's>
//     decode_ms=<best run's median>
//     decode_ms_runs=<each run's median> params_mb=<memory().parameters> rss_load_mb=<VmRSS after the load>
//     peak_rss_mb=<VmHWM> gbs=<--bandwidth-mb's GB/s> tokens=<id,id,...>
// A quantized checkpoint (`qkv quantize --weights int8|q4|f16|bf16`) runs through `file` like any other.
// The prompt is (i * 7919 + 13) mod 50257 for i < N: bench/gpt2_export.py's prompt_ids.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "qkv/import.h"
#include "qkv/qkv.h"
#include "read_bandwidth.h"

namespace {

using qkv::bench::Timer;

double status_mb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0) return std::stod(line.substr(n + 1)) * 1024.0 / 1e6;  // kB
  return 0.0;
}

struct Args {
  std::string mode, path;
  int threads = 2, prompt = 32, fresh = 64, runs = 3;
  int bandwidth_mb = 0;  // > 0: after the generations, the read bandwidth over a buffer of this many MiB
  std::string label;     // RESULT's side= (default: the mode): run_gpt2.sh names each format's run
  std::string isa;       // force_isa's name ("sse4.1": the 4-lane kernels the wasm build compiles); empty: the best
};

int run(const Args& a) {
  if (a.mode == "bandwidth") {
    const double gbs = qkv::bench::read_bandwidth_gbs(double(1 << 30), a.threads, 10);
    std::printf("RESULT side=bandwidth threads=%d bytes=%d gbs=%.2f\n", a.threads, 1 << 30, gbs);
    return 0;
  }
  qkv::set_num_threads(a.threads);
  if (!a.isa.empty()) qkv::force_isa(a.isa);
  const Timer load_timer;
  std::unique_ptr<qkv::LanguageModel> lm =
      a.mode == "pretrained" ? qkv::load_pretrained(a.path) : qkv::LanguageModel::load_file(a.path);
  const double load_s = load_timer.seconds();
  lm->set_training(false);
  // The weights' bytes as the model holds them (packed + scales for a quantized checkpoint) and the resident set
  // right after loading, before the generation plans its arena.
  const double params_mb = double(lm->memory().parameters) / 1e6, rss_load_mb = status_mb("VmRSS:");
  const int vocab = lm->config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt));
  for (int i = 0; i < a.prompt; ++i) prompt[size_t(i)] = static_cast<int32_t>((int64_t(i) * 7919 + 13) % vocab);

  qkv::SamplingOptions s;
  s.max_new_tokens = a.fresh;
  s.temperature = 0.f;
  std::vector<int32_t> tokens;
  double best_prefill = 1e30, best_decode = 1e30, first_prefill = 0;
  std::string decode_runs;
  for (int r = 0; r < a.runs; ++r) {
    std::vector<int32_t> out;
    std::vector<double> step_ms;
    double prefill_ms = 0;
    qkv::LanguageModel::Generation g = lm->start_generation(prompt, s);
    for (int i = 0; i < a.fresh; ++i) {
      const Timer t;
      const std::optional<int32_t> next = g.next();
      const double ms = 1e3 * t.seconds();
      if (!next) break;
      out.push_back(*next);
      if (i == 0)
        prefill_ms = ms;
      else
        step_ms.push_back(ms);
    }
    if (out.size() != size_t(a.fresh) || (!tokens.empty() && out != tokens)) {
      std::fprintf(stderr, "qkv_gpt2_bench: run %d made %zu tokens (expected %d, the same each run)\n", r, out.size(),
                   a.fresh);
      return 1;
    }
    tokens = out;
    std::sort(step_ms.begin(), step_ms.end());
    const double median = step_ms.empty() ? 0.0 : step_ms[step_ms.size() / 2];
    std::printf("run %d: prefill %.1f ms (with the first token), decode median %.2f ms/token (min %.2f, max %.2f)\n", r,
                prefill_ms, median, step_ms.empty() ? 0.0 : step_ms.front(), step_ms.empty() ? 0.0 : step_ms.back());
    if (r == 0) first_prefill = prefill_ms;
    best_prefill = std::min(best_prefill, prefill_ms);
    best_decode = std::min(best_decode, median);
    char run_ms[32];
    std::snprintf(run_ms, sizeof run_ms, "%s%.2f", r ? "," : "", median);
    decode_runs += run_ms;
  }
  std::string ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) ids += ',';
    ids += std::to_string(tokens[i]);
  }
  // The peak is read before the bandwidth's buffer exists; the bandwidth is measured seconds after the decode
  // steps, by the same process on the same threads, so the floor and the time it bounds share their conditions.
  const double peak_rss_mb = status_mb("VmHWM:");
  const double gbs =
      a.bandwidth_mb > 0 ? qkv::bench::read_bandwidth_gbs(double(a.bandwidth_mb) * (1 << 20), a.threads, 10) : 0.0;
  std::printf(
      "RESULT side=%s threads=%d isa=%s load_s=%.3f prefill_ms=%.1f first_prefill_ms=%.1f decode_ms=%.2f "
      "decode_ms_runs=%s params_mb=%.1f rss_load_mb=%.0f peak_rss_mb=%.0f gbs=%.2f tokens=%s\n",
      (a.label.empty() ? a.mode : a.label).c_str(), qkv::num_threads(), qkv::active_isa().c_str(), load_s, best_prefill,
      first_prefill, best_decode, decode_runs.c_str(), params_mb, rss_load_mb, peak_rss_mb, gbs, ids.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  bool ok = argc >= 2;
  int first_option = 3;
  if (ok) {
    a.mode = argv[1];
    if (a.mode == "bandwidth") {
      first_option = 2;
    } else {
      ok = argc >= 3 && (a.mode == "pretrained" || a.mode == "file");
      if (ok) a.path = argv[2];
    }
  }
  for (int i = first_option; ok && i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--isa" || k == "--label") {
      (k == "--isa" ? a.isa : a.label) = argv[i + 1];
      continue;
    }
    const int v = std::atoi(argv[i + 1]);
    if (k == "--threads")
      a.threads = v;
    else if (k == "--prompt")
      a.prompt = v;
    else if (k == "--new")
      a.fresh = v;
    else if (k == "--bandwidth-mb")
      a.bandwidth_mb = v;
    else if (k == "--runs")
      a.runs = v;
    else
      ok = false;
    ok = ok && v > 0;
  }
  if (!ok || (argc - first_option) % 2 != 0) {
    std::fprintf(stderr,
                 "usage: qkv_gpt2_bench pretrained DIR | file CKPT [--threads N] [--prompt N] [--new N] [--runs N] "
                 "[--isa NAME] [--label SIDE] [--bandwidth-mb N]\n       qkv_gpt2_bench bandwidth [--threads N]\n");
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_gpt2_bench: %s\n", e.what());
    return 1;
  }
}
