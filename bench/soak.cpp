// Soak: trains the char GPT (nanoGPT's CPU recipe, char_gpt_recipe.h) for many steps natively and samples
// the process's resident memory every `--every` steps, to show that a long run stays flat (no leak, no
// growth after warm-up). Not a test: bench/soak.sh runs it and bench/soak_report.py plots the curve.
//
// usage: qkv_soak [--steps 10000] [--every 100] [--threads 2] [--max-seconds 0]
//                 [--data ../shared/data/tinyshakespeare.txt]
// prints CSV lines: step,rss_bytes,loss,seconds (step 0 is after building the model, before training)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "char_gpt_recipe.h"
#include "qkv/qkv.h"
#include "qkv/thread_pool.h"
#include "qkv/tokenizer.h"
#include "runtime/random.h"

namespace {

// Resident set size from /proc/self/statm (its second field, in pages).
long long resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * ::sysconf(_SC_PAGESIZE) : -1;
}

const char* flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qkv;
  const int steps = std::atoi(flag(argc, argv, "--steps", "10000"));
  const int every = std::atoi(flag(argc, argv, "--every", "100"));
  const double max_seconds = std::atof(flag(argc, argv, "--max-seconds", "0"));
  const std::string path = flag(argc, argv, "--data", "../shared/data/tinyshakespeare.txt");
  set_num_threads(std::atoi(flag(argc, argv, "--threads", "2")));

  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) {
    std::fprintf(stderr, "qkv_soak: cannot read %s (--data)\n", path.c_str());
    return 1;
  }
  const Tokenizer tok = Tokenizer::char_level(text, SpecialTokens{false, false, false, false});
  const std::vector<int32_t> ids = tok.encode(text);
  const size_t train_end = ids.size() * 9 / 10;

  OptimizerConfig opt = bench::char_gpt_optimizer();
  opt.total_steps = steps;  // the cosine schedule spans the whole soak
  LanguageModel model(bench::char_gpt_config(tok.size()), opt);
  constexpr int B = bench::kCharBatch, T = bench::kCharContext;
  // The batch buffers live outside the loop: the loop itself allocates nothing.
  std::vector<int32_t> inputs(B * T), targets(B * T);
  Rng rng(1);

  std::printf("step,rss_bytes,loss,seconds\n");
  std::printf("0,%lld,nan,0\n", resident_bytes());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    for (int b = 0; b < B; ++b) {
      const size_t start = rng.next_u64() % (train_end - T - 1);
      std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start), T, inputs.begin() + b * T);
      std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start) + 1, T, targets.begin() + b * T);
    }
    const float loss = model.train_step(inputs, targets, B, T);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step % every == 0) {
      std::printf("%d,%lld,%.4f,%.1f\n", step, resident_bytes(), loss, seconds);
      std::fflush(stdout);
    }
    if (max_seconds > 0 && seconds > max_seconds) {
      std::fprintf(stderr, "qkv_soak: stopped at step %d: --max-seconds %.0f reached\n", step, max_seconds);
      break;
    }
  }
  return 0;
}
