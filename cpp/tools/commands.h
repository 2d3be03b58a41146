#pragma once
// The qkv tool's subcommands. Each returns the process exit status: 0 done, 1 failure (a qkv::Error), 2 a
// usage mistake (UsageError), 128 + signal for a training run stopped by Ctrl-C (after saving).
#include <cstdint>
#include <string>

#include "qkv/tensor.h"  // Device

namespace qkv::cli {

// An option's value and whether the command line gave it.
template <class T>
struct Flag {
  T value{};
  bool given = false;
};

struct TrainArgs {
  std::string data, config, out, resume, device;  // device: "" = not given
  std::string precision;                          // --precision fp32|tf32|bf16 ("" = fp32), CUDA only
  Flag<std::string> model{"lm"}, non_finite{"error"};
  Flag<std::string> recompute{"auto"};  // activation recomputation: auto (on with --lora), on or off
  Flag<std::string> tokenizer{"char"};  // lm: char, or bpe trained on --data to --vocab-size tokens
  Flag<int> steps, threads, batch, eval_every, log_every, vocab_size;
  Flag<double> lr;
  Flag<uint64_t> seed;
  // Data parallel (started by mpirun): the bucket size of the gradient sums, and the replica check of the tests.
  double bucket_mb = 1.0;
  bool check_replicas = false;
  int zero = 0;      // 1: ZeRO-1, the Adam moments sharded across the ranks
  bool mpi = false;  // an MPI session is active (set by main, not a flag)
  // LoRA (lora_commands.h): --lora SPEC on the model of --init MODEL, the adapter written to --adapter-out DIR in
  // --adapter-names (qkv | gpt2; "" = the model's origin decides).
  std::string lora, init, adapter_out, adapter_names;
};

struct GenerateArgs {
  std::string ckpt, prompt, stop, device;  // device: "" = not given
  std::string model;                       // a Hugging Face model folder (instead of ckpt)
  std::string prompt_ids;                  // the prompt as token ids ("1,2,3" or "1 2 3"), instead of prompt
  bool prompt_given = false;               // --prompt was given (an empty text is a prompt)
  std::string precision;                   // as TrainArgs::precision
  int max_tokens = 200, top_k = 0;
  double temperature = 0.8, top_p = 1.0, repetition_penalty = 1.0;
  int beam = 1;
  double length_penalty = 0.6;
  bool ignore_eos = false;  // --model: go on past the end-of-text token (which otherwise ends generation)
  std::string adapter;      // a PEFT adapter folder loaded onto the model (lora_commands.h)
  Flag<uint64_t> seed;
  Flag<int> threads;
};

struct EvalArgs {
  std::string ckpt, data, device;  // device: "" = not given
  std::string precision;           // as TrainArgs::precision
  Flag<int> batch, threads;
};

struct InfoArgs {
  std::string ckpt;
  bool all = false;
};

struct ImportArgs {
  std::string from = "auto", in, out, activation, norm, tokenizer;
  std::string weights;  // a folder: "f32" (default) or "keep" (qkv/import.h PretrainedWeights); "" = not given
  int heads = 0, context = 0, pad_id = 0;
  Flag<bool> scale_embedding;
};

struct QuantizeArgs {
  std::string in, out, weights;
  Flag<bool> embedding;             // unset: the model's default (qkv/quantize.h)
  std::string activations = "f32";  // QuantizeOptions::activations
};

struct BenchArgs {
  Flag<int> threads;
  int steps = 5;
  double seconds = 0.25;
};

// --- shared by the commands (commands.cpp) ---
// The device a command runs on: --device when given, else the config file's "device" (train), else the CPU. CUDA is
// refused here, before any file is read, with the reason it cannot be used.
Device choose_device(const std::string& flag, const std::string& from_config = "", const std::string& config = "");
// --precision: the CUDA products' arithmetic for this process; anything but fp32 on the CPU is a UsageError.
void set_precision(const std::string& flag, Device device);
// --threads, when given; a UsageError naming it when out of range.
void set_threads(const Flag<int>& threads);

int run_train(const TrainArgs& args);
int run_generate(const GenerateArgs& args);
int run_eval(const EvalArgs& args);
int run_info(const InfoArgs& args);
int run_import(const ImportArgs& args);
int run_quantize(const QuantizeArgs& args);
int run_bench(const BenchArgs& args);

}  // namespace qkv::cli
