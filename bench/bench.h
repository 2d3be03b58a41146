#pragma once
// The commands of qkv_bench (bench.cpp parses the command line; each command lives in its own file).
#include <string>

namespace qkv::bench {

struct Options {
  int threads = 0;                 // gemm, peak: measure 1..threads; training: run at this many. 0: qkv::max_threads()
  int steps = 0;                   // timed training steps; 0: the command's default
  int warmup = -1;                 // untimed steps before them; -1: the command's default
  int batch = 0;                   // 0: the reference configuration's batch
  std::string config = "recipe";   // char-gpt: "recipe" (bench/char_gpt.cpp's) or "package" (the npm package's)
  std::string isa;                 // force this instruction set (qkv::force_isa); empty: the best one
  std::string mode = "lora";       // lora: "lora", "full" or "lora-q4" (lora_bench.cpp)
  int layers = 0;                  // lora: fewer layers than GPT-2's 12, for a smoke run; 0: 12
  bool quick = false;              // shorter measurements, for a smoke run
  std::string recompute = "auto";  // lora: Model::set_recompute, "auto", "on" or "off"
  bool accumulate = false;         // lora: forward_backward + apply_gradients instead of train_step
};

// Peak FLOP/s table (peak.cpp).
int run_peak(const Options& o);
// qkv gemm vs OpenBLAS with % of peak, then the 1 -> n thread scaling of both (gemm_bench.cpp).
int run_gemm(const Options& o);
// gemm per instruction set, forced (gemm_bench.cpp).
int run_gemm_isas(const Options& o);
// gemm_quant's decode products (M = 1) per format: GB/s of weights and share of streaming bandwidth (gemm_bench.cpp).
int run_gemm_quant(const Options& o);
// One training configuration at o.threads threads; prints a table and a RESULT line (train_bench.cpp).
int run_char_gpt(const Options& o);
int run_seq2seq(const Options& o);
// LoRA vs full fine-tuning on GPT-2 124M's shape: tokens/s, % of peak, peak memory (lora_bench.cpp).
int run_lora(const Options& o);
// Generation tokens/s with and without the KV cache (generate_bench.cpp).
int run_generate(const Options& o);

}  // namespace qkv::bench
