// qkv: the command-line tool. Train a model on a text or TSV file, generate from a checkpoint, evaluate
// it, inspect it, and time the kernels. The flags are parsed here (CLI11); the work is in commands.cpp.
//
// Exit status: 0 done, 1 failure (the message names the file or flag), 2 usage error, 128 + signal when
// Ctrl-C stopped a training run (after its checkpoint was saved).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "distributed.h"
#include "lora_commands.h"
#include "parallel/mpi.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "task.h"

namespace {

using qkv::cli::Flag;

// Options bound to a Flag<T> learn after parsing whether they were given.
class Flags {
 public:
  template <class T>
  CLI::Option* add(CLI::App* app, const std::string& name, Flag<T>& flag, const std::string& help) {
    CLI::Option* o = app->add_option(name, flag.value, help);
    seen_.emplace_back(o, &flag.given);
    return o;
  }
  void resolve() {
    for (auto& [o, given] : seen_) *given = o->count() > 0;
  }

 private:
  std::vector<std::pair<CLI::Option*, bool*>> seen_;
};

// Checks of numeric and boolean flags that say what is expected. CLI11's own print "Value 0 not in range 0.000000 to
// 179769313486231570814527..." for --threads 0 and "Could not convert: --max-tokens = 99999999999"; these give
// "--threads: expected a whole number >= 1, got "0"" for any text, before CLI11 converts it.
CLI::Validator whole(long long lo, long long hi = std::numeric_limits<int>::max()) {
  const std::string expected = hi == std::numeric_limits<int>::max() || hi == std::numeric_limits<long long>::max()
                                   ? "a whole number >= " + std::to_string(lo)
                                   : "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        long long v = 0;
        const char *b = text.data(), *e = b + text.size();
        const auto [end, ec] = std::from_chars(b, e, v);
        if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == e && v > hi))
          return "expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got \"" +
                 text + "\"";
        if (ec != std::errc() || end != e || v < lo) return "expected " + expected + ", got \"" + text + "\"";
        return "";
      },
      "");
}

// A finite number; above `lo` (or at least it, with `closed`) and at most `hi` where they are given.
CLI::Validator number(std::optional<double> lo = std::nullopt, bool closed = false,
                      std::optional<double> hi = std::nullopt) {
  std::string expected = "a number";
  if (lo) expected += std::string(closed ? " >= " : " > ") + CLI::detail::to_string(*lo);
  if (hi) expected += std::string(lo ? " and" : "") + " <= " + CLI::detail::to_string(*hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !std::isfinite(v) || (lo && (closed ? v < *lo : v <= *lo)) ||
            (hi && v > *hi))
          return "expected " + expected + ", got \"" + text + "\"";
        return "";
      },
      "");
}

// CLI11's spellings of a bool.
CLI::Validator boolean() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::string t = text;
        for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        for (const char* ok : {"true", "false", "1", "0", "yes", "no", "on", "off"})
          if (t == ok) return "";
        return "expected true or false, got \"" + text + "\"";
      },
      "");
}

const char* const kTrainFooter = R"(
Data (--data):
  lm          plain UTF-8 text; the tokenizer is its distinct characters, or with --tokenizer bpe
              --vocab-size N a byte-level BPE trained on it (GPT-2's; <|endoftext|> separates documents)
  seq2seq     TSV lines source<TAB>target
  classifier  TSV lines label<TAB>text
  The last 10% (of the text, or of the lines) is held out for the evaluation lines.

Config (--config): a preset name, or a JSON file whose fields override a preset's:
  {"preset": "small", "model": {"layers": 6}, "optimizer": {"lr": 3e-4}, "batch": 16}
  "model" takes the model config JSON fields and "optimizer" the optimizer config fields (qkv/config.h); the
  vocabulary sizes come from the data, and seq2seq and classifier take the context from the longest example
  unless it is given. A cosine schedule without total_steps ends at --steps.
Presets (tiny is the default):
{presets}
Checkpoints (--out, default model.safetensors; with --resume, the resumed file) are written atomically at
every evaluation and at the end, with the tokenizer inside. Ctrl-C saves one and exits with status 130.
--resume continues up to --steps (default: the planned total) with the same batches and losses as an
uninterrupted run; the model, optimizer, batch size and seed come from the checkpoint (--lr and --non-finite
may still be given).

Non-finite steps (--non-finite, or "non_finite" in the optimizer config): by default a NaN or infinite loss
or gradient norm stops training with status 1 (the last checkpoint is kept), and so does an evaluation whose
held-out loss is not finite (its checkpoint is not saved). With skip, such a step leaves the weights, the Adam
moments and the schedule as they were, is reported on stderr and counted (the count is saved in the
checkpoint); it still counts toward --steps, as its batch was drawn.

Several processes (data parallel): mpirun -np N qkv train <the same arguments>. --batch stays the global
batch: each rank trains on its batch/N rows of every batch and the gradients are summed across the ranks
(MPI all-reduce, in buckets overlapping the backward) before clipping and the step, so N ranks follow one
process with the same --batch. Rank 0 logs, evaluates and writes the checkpoint; --resume works on any
number of ranks. --zero 1 keeps 1/N of the Adam moments on each rank (ZeRO-1) and all-gathers the updated
parameters after each step: the same values, 2(N-1)/N of the moments' memory saved per rank. Ranks started
with different arguments or data are refused, naming the field; a rank that fails ends the whole job
(MPI_Abort), naming the rank. With --device cuda, one GPU per rank and NCCL (builds that have it). To stop
with a checkpoint: kill -USR1 <mpirun's pid> (mpirun ends the job itself on Ctrl-C).

Exit status: 0 done, 1 failure, 2 usage error, 130 interrupted (checkpoint saved).)";

}  // namespace

int main(int argc, char** argv) {
  using namespace qkv::cli;
  CLI::App app{
      "qkv: train Transformers on text files, generate, evaluate and inspect checkpoints.\n" + qkv::device_summary(),
      "qkv"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("qkv ") + QKV_VERSION);
  app.footer("\nRun 'qkv COMMAND --help' for a command's flags.\nExit status: 0 done, 1 failure, 2 usage error.");
  Flags flags;

  TrainArgs train;
  CLI::App* t = app.add_subcommand("train", "Train a model on a data file and write a checkpoint");
  t->add_option("--data", train.data, "Training data: text (lm) or TSV (seq2seq, classifier)")->required();
  flags.add(t, "--model", train.model, "lm, seq2seq or classifier (default lm)")
      ->check(CLI::IsMember({"lm", "seq2seq", "classifier"}));
  t->add_option("--config", train.config, "A preset (tiny, small) or a JSON file (below)");
  flags.add(t, "--tokenizer", train.tokenizer, "lm: char (default: the text's characters) or bpe (byte-level BPE)")
      ->check(CLI::IsMember({"char", "bpe"}));
  flags
      .add(t, "--vocab-size", train.vocab_size,
           "--tokenizer bpe: tokens to train, <|endoftext|> and 256 bytes included")
      ->check(whole(257, 1 << 24));
  flags.add(t, "--steps", train.steps, "Total optimizer steps (default 1000)")->check(whole(1));
  t->add_option("--out", train.out, "Checkpoint to write (default model.safetensors)");
  t->add_option("--resume", train.resume, "Checkpoint to continue from");
  flags.add(t, "--threads", train.threads, "CPU threads (default: all cores)")->check(whole(1));
  t->add_option("--device", train.device, "cpu or cuda (default: the config file's \"device\", else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  t->add_option("--precision", train.precision,
                "cuda: fp32 (default), tf32 or bf16 products (weights, optimizer and checkpoint stay fp32)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  flags.add(t, "--batch", train.batch, "Rows per batch, across all ranks under mpirun (default: the preset's)")
      ->check(whole(1));
  flags.add(t, "--lr", train.lr, "Peak learning rate (default: the preset's)")->check(number(0.0));
  flags.add(t, "--non-finite", train.non_finite, "On a NaN/inf loss or gradient: error stops, skip skips the step")
      ->check(CLI::IsMember({"error", "skip"}));
  flags
      .add(t, "--recompute", train.recompute,
           "Activation recomputation: on keeps each layer's input only (less memory, one more forward), off keeps "
           "every activation (faster); auto (default) is on with --lora")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  flags.add(t, "--eval-every", train.eval_every, "Evaluate and save every N steps (default steps/10; 0: at the end)")
      ->check(whole(0));
  flags.add(t, "--log-every", train.log_every, "Progress line every N steps when stderr is not a terminal (10)")
      ->check(whole(1));
  flags.add(t, "--seed", train.seed, "Seed of the initial weights and the batch order (default 1337)")
      ->check(whole(0, std::numeric_limits<long long>::max()));
  t->add_option("--bucket-mb", train.bucket_mb, "mpirun: MiB of gradients per all-reduce bucket (default 1)")
      ->check(number(0.0, false, 4096.0));
  t->add_option("--zero", train.zero,
                "mpirun: 1 shards the Adam moments across the ranks (ZeRO-1: 1/N of their memory each); 0 (default)")
      ->check(CLI::IsMember({0, 1}));
  t->add_flag("--check-replicas", train.check_replicas,
              "mpirun: compare every rank's parameters (a hash) after every step; stop if they differ");
  t->add_option("--lora", train.lora,
                "LoRA adapters on --init's frozen model: rank=8,alpha=16,dropout=0.05,targets=qkv+out+up+down,seed=0");
  t->add_option("--init", train.init,
                "With --lora: the model to adapt, a checkpoint (qkv train / qkv import) or a GPT-2 folder");
  t->add_option("--adapter-out", train.adapter_out,
                "Also write the adapter alone, as PEFT saves it (adapter_config.json + adapter_model.safetensors)");
  t->add_option("--adapter-names", train.adapter_names,
                "--adapter-out's module names: gpt2 (default for a GPT-2 model) or qkv")
      ->check(CLI::IsMember({"qkv", "gpt2"}));
  t->footer([] {
    std::string text = kTrainFooter;
    const std::string mark = "{presets}\n";
    return text.replace(text.find(mark), mark.size(), describe_presets());
  }());

  GenerateArgs gen;
  CLI::App* g = app.add_subcommand("generate", "Continue a prompt with an lm checkpoint (or translate with seq2seq)");
  CLI::Option* g_ckpt =
      g->add_option("--ckpt", gen.ckpt, "A qkv checkpoint (written by qkv train, import, quantize or merge)");
  g->add_option("--model", gen.model, "A Hugging Face GPT-2 folder (config.json + model.safetensors)")
      ->excludes(g_ckpt);
  CLI::Option* g_prompt = g->add_option("--prompt", gen.prompt, "The text to continue");
  g->add_option("--prompt-ids", gen.prompt_ids, "The prompt as token ids (\"1,2,3\"); the new ids are printed")
      ->excludes(g_prompt);
  g->add_option("--max-tokens", gen.max_tokens, "Tokens to generate at most (default 200)")->check(whole(0));
  g->add_option("--temperature", gen.temperature, "Softmax temperature; 0 = greedy (default 0.8)")
      ->check(number(0.0, true));
  g->add_option("--top-k", gen.top_k, "Sample from the k most probable tokens; 0 = off (default)")->check(whole(0));
  g->add_option("--top-p", gen.top_p, "Nucleus sampling mass in (0, 1]; 1 = off (default)")->check(number(0.0));
  g->add_option("--repetition-penalty", gen.repetition_penalty, "CTRL's penalty on repeated tokens; 1 = off")
      ->check(number(0.0));
  g->add_option("--stop", gen.stop, "Characters that end generation (each is emitted, then it stops)");
  g->add_flag("--ignore-eos", gen.ignore_eos,
              "--model: go on past the end-of-text token (config.json's eos_token_id), which otherwise ends "
              "generation unprinted");
  g->add_option(
      "--adapter", gen.adapter,
      "A LoRA adapter folder (adapter_config.json + adapter_model.safetensors, PEFT's or qkv's) on the model");
  g->add_option("--beam", gen.beam, "seq2seq: beam search width; 1 = greedy (default)")->check(whole(1, 64));
  g->add_option("--length-penalty", gen.length_penalty, "seq2seq beams: GNMT's alpha (default 0.6; 0 = none)")
      ->check(number(0.0, true));
  flags.add(g, "--seed", gen.seed, "Seed of the sampling (default: random, printed on stderr)")
      ->check(whole(0, std::numeric_limits<long long>::max()));
  flags.add(g, "--threads", gen.threads, "CPU threads")->check(whole(1));
  g->add_option("--device", gen.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  g->add_option("--precision", gen.precision,
                "cuda: fp32 (default), tf32 or bf16 products (weights, optimizer and checkpoint stay fp32)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  g->footer(
      "\nThe prompt and then each new token are written to stdout as they come. A seq2seq checkpoint decodes\n"
      "greedily, or with beam search (--beam); the sampling flags do not apply to it. --model DIR reads a Hugging\n"
      "Face GPT-2 folder and its BPE tokenizer, and stops at its end-of-text token (config.json's eos_token_id, else\n"
      "the tokenizer's <|endoftext|>) without printing it, as Hugging Face's generate does (--ignore-eos goes on).\n"
      "A seq2seq's translation follows its source and \" -> \". With --prompt-ids (an lm checkpoint or --model) the\n"
      "new token ids are written, space-separated, as they come. Sampling without --seed prints the seed it drew.\n"
      "\nExit status: 0 done, 1 failure, 2 usage error.");

  EvalArgs eval;
  CLI::App* e = app.add_subcommand("eval", "Loss, perplexity and accuracy of a checkpoint on a data file");
  e->add_option("--ckpt", eval.ckpt, "A qkv checkpoint (written by qkv train, import, quantize or merge)")->required();
  e->add_option("--data", eval.data, "Data in the checkpoint model's format (all of it is evaluated)")->required();
  flags.add(e, "--batch", eval.batch, "Rows per batch")->check(whole(1));
  flags.add(e, "--threads", eval.threads, "CPU threads")->check(whole(1));
  e->add_option("--device", eval.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  e->add_option("--precision", eval.precision, "cuda: fp32 (default), tf32 or bf16 products")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));

  InfoArgs info;
  CLI::App* i = app.add_subcommand("info", "A checkpoint's model, config, parameter count and tensors");
  std::string info_file;
  i->add_option("file", info_file,
                "A qkv checkpoint, any safetensors file or a Hugging Face model folder (or give --ckpt)");
  i->add_option("--ckpt", info.ckpt, "The same file");
  i->add_flag("--all", info.all, "Also list the optimizer's moment tensors");

  ImportArgs imp;
  CLI::App* im = app.add_subcommand("import", "Convert a PyTorch state dict (safetensors) into a qkv checkpoint");
  im->add_option("IN", imp.in,
                 "The state dict, saved with safetensors.torch.save_file; or a Hugging Face GPT-2 folder "
                 "(config.json + model.safetensors)")
      ->required();
  im->add_option("OUT", imp.out, "The qkv checkpoint to write")->required();
  im->add_option("--from", imp.from, "Its format (default auto: told by the tensor names)")
      ->check(CLI::IsMember({"auto", "qkv", "torch", "nanogpt", "gpt2", "seed000", "seed002", "seed003", "seed004"}));
  im->add_option("--heads", imp.heads, "Attention heads (the shapes cannot tell them; seed004's can)")->check(whole(1));
  im->add_option("--context", imp.context, "Longest sequence, when the file has no position table")->check(whole(1));
  im->add_option("--activation", imp.activation, "relu, gelu or gelu_tanh (default: the format's)")
      ->check(CLI::IsMember({"relu", "gelu", "gelu_tanh"}));
  im->add_option("--norm", imp.norm, "post or pre (default: the format's)")->check(CLI::IsMember({"post", "pre"}));
  flags.add(im, "--scale-embedding", imp.scale_embedding, "torch: multiply embeddings by sqrt(d_model) (true/false)")
      ->check(boolean());
  im->add_option("--pad-id", imp.pad_id, "Padding id of a seq2seq or classifier (default 0)")->check(whole(0));
  im->add_option("--tokenizer", imp.tokenizer, "A tokenizer JSON (qkv/tokenizer.h) to store in the checkpoint");
  im->add_option("--weights", imp.weights,
                 "A folder: f32 (default) converts every tensor to float32; keep stores its F16 / BF16 matrices in "
                 "that format (as qkv quantize --weights f16 / bf16 would, without a float32 copy; inference only)")
      ->check(CLI::IsMember({"f32", "keep"}));
  im->footer(
      "\nFormats: torch (nn.Transformer, nn.TransformerEncoder, the translation tutorial's Seq2SeqTransformer),\n"
      "nanogpt (nanoGPT's GPT), gpt2 (Hugging Face's GPT2Model / GPT2LMHeadModel: give the model's folder, whose\n"
      "config.json says the rest), seed000/seed002/seed003/seed004 (the tutorials' own classes), qkv.\n"
      "A .pt file is a pickle, which qkv does not run: in Python,\n"
      "  safetensors.torch.save_file(model.state_dict(), \"model.safetensors\")\n"
      "(for a tied nanoGPT, save_model, or clone lm_head.weight first). The checkpoint loads with\n"
      "X::load_file, the package's X.load, the demo, and, with --tokenizer, qkv generate.\n"
      "\nExit status: 0 done, 1 failure, 2 usage error.");

  QuantizeArgs quant;
  CLI::App* q = app.add_subcommand("quantize", "Store a model's weights in int8, q4, f16 or bf16 (inference only)");
  q->add_option("IN", quant.in, "A qkv checkpoint (any model), or a Hugging Face GPT-2 folder")->required();
  q->add_option("OUT", quant.out, "The quantized checkpoint to write")->required();
  q->add_option("--weights", quant.weights, "int8, q4, f16 or bf16")
      ->required()
      ->check(CLI::IsMember({"int8", "q4", "f16", "bf16"}));
  flags
      .add(q, "--embedding", quant.embedding,
           "Also the token embedding (true/false; default: true when it is the tied output head)")
      ->check(boolean());
  q->add_option("--activations", quant.activations,
                "int8: decoding quantizes the activations of the int8 / q4 products to int8 and takes integer dot "
                "products (faster on the CPU and in WebAssembly; saved in the checkpoint). Default f32")
      ->check(CLI::IsMember({"f32", "int8"}));
  q->footer(
      "\nEvery Linear weight (attention, feed-forward, heads) is stored packed; biases, LayerNorms and positions\n"
      "stay float32. The checkpoint loads everywhere a checkpoint does, for inference: generate and eval here,\n"
      "predict and generate in the library and the package.\n"
      "README \"Quantized weights\" gives each format's accuracy.\n"
      "\nExit status: 0 done, 1 failure, 2 usage error.");

  MergeArgs merge;
  CLI::App* mg = app.add_subcommand("merge", "Fold a LoRA adapter into its base model's weights");
  mg->add_option("MODEL", merge.model, "The base: a qkv checkpoint (float32) or a Hugging Face GPT-2 folder")
      ->required();
  mg->add_option("ADAPTER_DIR", merge.adapter, "The adapter folder (adapter_config.json + adapter_model.safetensors)")
      ->required();
  mg->add_option("OUT", merge.out, "The merged checkpoint to write (no adapters: W + alpha / r * B A)")->required();
  mg->footer(
      "\nA quantized base is refused: the fold would be rounded away when stored quantized again. Merge into the\n"
      "float32 model, then qkv quantize OUT. The checkpoint keeps MODEL's tokenizer, so qkv generate --ckpt OUT "
      "works.\n"
      "\nExit status: 0 done, 1 failure, 2 usage error.");

  BenchArgs bench;
  CLI::App* b = app.add_subcommand("bench", "Time gemm and a char-GPT training step (full benchmarks: bench/)");
  flags.add(b, "--threads", bench.threads, "Most threads (default: all cores)")->check(whole(1));
  b->add_option("--steps", bench.steps, "Training steps timed per thread count (default 5)")->check(whole(1));
  b->add_option("--seconds", bench.seconds, "Seconds per gemm shape (default 0.25)")->check(number(0.0));

  if (argc <= 1) {
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  const std::string first = argv[1];
  const std::vector<std::string> commands = {"train",  "generate", "eval",  "info",
                                             "import", "quantize", "merge", "bench"};
  if (first[0] != '-' && std::find(commands.begin(), commands.end(), first) == commands.end()) {
    std::fprintf(
        stderr, "qkv: unknown command \"%s\": expected train, generate, eval, info, import, quantize, merge or bench\n",
        argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
    flags.resolve();
  } catch (const CLI::ParseError& err) {
    if (err.get_exit_code() == 0) return app.exit(err);  // --help, --version
    const auto parsed = app.get_subcommands();
    const std::string command = parsed.empty() ? "" : " " + parsed.front()->get_name();
    std::fprintf(stderr, "qkv%s: %s\nRun 'qkv%s --help' for usage.\n", command.c_str(), err.what(), command.c_str());
    return 2;
  }
  const std::string command = app.get_subcommands().front()->get_name();
  // Under mpirun, train is data parallel: MPI lives until main returns, so that a failing rank can end the
  // job (MPI_Abort) rather than leave the others waiting in a reduction.
  std::optional<qkv::dist::MpiSession> mpi;
  const auto fail = [&](int status) {
    if (mpi && mpi->active() && mpi->size() > 1) qkv::dist::abort_all(status);
    return status;
  };
  const std::string rank = [&] {
    try {
      if (command == "train") mpi.emplace();
    } catch (const std::exception& err) {
      std::fprintf(stderr, "qkv train: error: %s\n", err.what());
      std::exit(1);
    }
    return mpi && mpi->active() && mpi->size() > 1
               ? " (rank " + std::to_string(mpi->rank()) + " of " + std::to_string(mpi->size()) + ")"
               : std::string();
  }();
  train.mpi = mpi && mpi->active();
  try {
    if (command == "train") return run_train(train);
    if (command == "generate") {
      gen.prompt_given = g_prompt->count() > 0;
      return run_generate(gen);
    }
    if (command == "eval") return run_eval(eval);
    if (command == "info") {
      if (info.ckpt.empty()) info.ckpt = info_file;
      if (info.ckpt.empty() || (!info_file.empty() && info_file != info.ckpt))
        throw UsageError(info.ckpt.empty() ? "give the file: qkv info FILE (or --ckpt FILE)"
                                           : "two files given (FILE and --ckpt): give one");
      return run_info(info);
    }
    if (command == "import") return run_import(imp);
    if (command == "quantize") return run_quantize(quant);
    if (command == "merge") return run_merge(merge);
    return run_bench(bench);
  } catch (const UsageError& err) {
    std::fprintf(stderr, "qkv %s%s: %s\nRun 'qkv %s --help' for usage.\n", command.c_str(), rank.c_str(), err.what(),
                 command.c_str());
    return fail(2);
  } catch (const CollectiveError& err) {  // every rank has it: said once, and no abort
    if (!mpi || mpi->rank() == 0) std::fprintf(stderr, "qkv %s: error: %s\n", command.c_str(), err.what());
    return 1;
  } catch (const std::exception& err) {  // qkv::Error, and anything the system throws (bad_alloc)
    std::fprintf(stderr, "qkv %s%s: error: %s\n", command.c_str(), rank.c_str(), err.what());
    std::fflush(stderr);
    return fail(1);
  }
}
