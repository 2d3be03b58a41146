// qkv_bench: the native CPU benchmarks (bench/README.md). Not tests: each command prints a table.
//
//   qkv_bench peak      [--threads N] [--quick]   peak FLOP/s of this machine per instruction set
//   qkv_bench gemm      [--threads N] [--quick]   qkv gemm vs OpenBLAS, % of peak, 1 -> N thread scaling
//   qkv_bench gemm-isas [--threads N] [--quick]   qkv gemm per instruction set, forced
//   qkv_bench gemm-quant [--threads N] [--quick] [--isa I]   decode products with f16/bf16/int8/q4 weights, GB/s
//   qkv_bench char-gpt  [--threads N] [--steps N] [--warmup N] [--batch N] [--config recipe|package] [--isa I]
//   qkv_bench seq2seq   [--threads N] [--steps N] [--warmup N] [--batch N] [--isa I]
//   qkv_bench generate  [--threads N] [--steps runs] [--warmup runs] [--isa I]
//   qkv_bench lora      [--mode lora|full|lora-q4] [--threads N] [--steps N] [--warmup N] [--batch N] [--layers N]
//
// --threads defaults to the machine's hardware threads (at most qkv::max_threads()). bench/run_cpu.sh runs them all
// beside the peers.
#include "bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "qkv/qkv.h"

namespace {

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s peak|gemm|gemm-isas|gemm-quant|char-gpt|seq2seq|generate|lora [--threads N] [--steps N] [--warmup N]\n"
      "       [--batch N] [--config recipe|package] [--mode lora|full|lora-q4] [--layers N] [--isa NAME] [--quick]\n"
      "       [--recompute auto|on|off] [--accumulate]\n"
      "       (bench/README.md)\n",
      argv0);
  return 2;
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line through `| tee`, as the runs go
  if (argc < 2) return usage(argv[0]);
  const std::string command = argv[1];
  qkv::bench::Options o;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      o.quick = true;
      continue;
    }
    if (flag == "--accumulate") {
      o.accumulate = true;
      continue;
    }
    if (i + 1 >= argc) return usage(argv[0]);
    const char* value = argv[++i];
    if (flag == "--threads")
      o.threads = std::atoi(value);
    else if (flag == "--steps")
      o.steps = std::atoi(value);
    else if (flag == "--warmup")
      o.warmup = std::atoi(value);
    else if (flag == "--batch")
      o.batch = std::atoi(value);
    else if (flag == "--config")
      o.config = value;
    else if (flag == "--isa")
      o.isa = value;
    else if (flag == "--mode")
      o.mode = value;
    else if (flag == "--layers")
      o.layers = std::atoi(value);
    else if (flag == "--recompute")
      o.recompute = value;
    else
      return usage(argv[0]);
  }
  if (o.threads <= 0) o.threads = std::max(1, std::min(qkv::max_threads(), int(std::thread::hardware_concurrency())));

  std::printf("qkv %s bench %s; instruction sets here:", qkv::version(), command.c_str());
  for (const auto& isa : qkv::available_isas()) std::printf(" %s", isa.c_str());
  std::printf("\n");
  if (command == "peak") return qkv::bench::run_peak(o);
  if (command == "gemm") return qkv::bench::run_gemm(o);
  if (command == "gemm-isas") return qkv::bench::run_gemm_isas(o);
  if (command == "gemm-quant") return qkv::bench::run_gemm_quant(o);
  if (command == "char-gpt") return qkv::bench::run_char_gpt(o);
  if (command == "seq2seq") return qkv::bench::run_seq2seq(o);
  if (command == "generate") return qkv::bench::run_generate(o);
  if (command == "lora") return qkv::bench::run_lora(o);
  return usage(argv[0]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
