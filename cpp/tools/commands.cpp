// The qkv tool's subcommands train, generate, eval, info and bench (commands.h); import and quantize have their
// own files (import_command.cpp, quantize_command.cpp).
#include "commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "parallel/mpi.h"
#if QKV_NCCL
#include "parallel/nccl.h"
#endif
#include "distributed.h"
#include "io/checkpoint.h"
#include "io/checksum.h"
#include "kernels/kernels.h"
#include "lora_commands.h"
#include "nn/parameters.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/cpu.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "qkv/thread_pool.h"
#include "qkv/tokenizer.h"
#include "runtime/random.h"
#include "task.h"

namespace qkv::cli {

// --- shared checks ---------------------------------------------------------------------------------------

// The device a command runs on: --device when given, else the config file's "device" (train), else the CPU.
// CUDA is refused here, before any file is read, with the reason it cannot be used.
Device choose_device(const std::string& flag, const std::string& from_config, const std::string& config) {
  const bool given = !flag.empty();
  const std::string name = given ? flag : from_config.empty() ? "cpu" : from_config;
  const std::string where = given ? "--device " + name : config + ": \"device\": \"" + name + "\"";
  if (name == "cpu") return Device::CPU;
  if (name != "cuda") throw UsageError(where + ": expected cpu or cuda");
  check(cuda_device_count() > 0, where, ": CUDA cannot be used here: ", cuda_unavailable_reason(),
        "; use --device cpu");
  return Device::CUDA;
}

// --precision: the CUDA products' arithmetic for this process (qkv::set_cuda_precision). Anything but fp32 on the
// CPU is refused, as it would change nothing: the CPU computes in fp32.
void set_precision(const std::string& flag, Device device) {
  if (flag.empty()) return;
  const CudaPrecision p = [&] {
    try {
      return parse_cuda_precision(flag, "--precision");
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }();
  if (p != CudaPrecision::FP32 && device != Device::CUDA)
    throw UsageError("--precision " + flag + " is a CUDA setting (the CPU computes in fp32): add --device cuda");
  if (device == Device::CUDA) set_cuda_precision(p);
}

void set_threads(const Flag<int>& threads) {
  if (!threads.given) return;
  try {
    set_num_threads(threads.value);
  } catch (const Error& e) {
    throw UsageError(std::string("--threads: ") + e.what());
  }
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// --- Ctrl-C: a flag the training loop checks between steps ----------------------------------------------

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_signal(int sig) { g_signal = sig; }

// The first SIGINT or SIGTERM sets the flag; the handler then resets, so a second one ends the process at
// once (the checkpoint on disk is still whole: saves are atomic). Under mpirun a rank often gets the signal twice
// (from the terminal or launcher's process group, and forwarded by mpirun), so there every one just sets the
// flag; the ranks then stop together at the end of the step (mpirun kills what does not end).
void catch_signals(bool second_ends = true) {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = second_ends ? SA_RESETHAND : 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // mpirun ends the job itself on SIGINT and SIGTERM but passes SIGUSR1 on to the ranks: under mpirun,
  // `kill -USR1 <mpirun>` is the way to stop with a checkpoint.
  if (!second_ends) sigaction(SIGUSR1, &sa, nullptr);
}

// --- the progress line -----------------------------------------------------------------------------------

std::string duration_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// step/total, loss, tokens/s and ETA on stderr: redrawn in place (\r) at most 10 times a second when
// stderr is a terminal, otherwise a plain line every `every` steps and at the last one.
class Progress {
 public:
  Progress(int start, int total, int every)
      : start_(start), total_(total), every_(std::max(1, every)), tty_(isatty(STDERR_FILENO) == 1) {}

  void update(int step, float loss, long long tokens) {
    tokens_ += tokens;
    const double elapsed = seconds_since(t0_);
    if (tty_ ? (step < total_ && seconds_since(drawn_) < 0.1) : (step % every_ != 0 && step != total_)) return;
    drawn_ = Clock::now();
    const double per_step = elapsed / (step - start_);
    std::fprintf(stderr, "%sstep %d/%d  loss %.6f  %.0f tok/s  ETA %s%s", tty_ ? "\r" : "", step, total_, loss,
                 tokens_ / std::max(elapsed, 1e-9), duration_text(per_step * (total_ - step)).c_str(),
                 tty_ ? "\033[K" : "\n");
    std::fflush(stderr);
    shown_ = tty_;
  }

  // Before printing a line of results: ends the in-place line.
  void clear() {
    if (!shown_) return;
    std::fputs("\n", stderr);
    shown_ = false;
  }

 private:
  int start_, total_, every_;
  bool tty_, shown_ = false;
  long long tokens_ = 0;
  Clock::time_point t0_ = Clock::now(), drawn_ = Clock::now() - std::chrono::seconds(1);
};

// Prints results on stdout (flushed, so pipes see them as they come).
template <class... Args>
void say(Progress* progress, const char* format, Args... args) {
  if (progress) progress->clear();
  std::printf(format, args...);
  std::fflush(stdout);
}

// Appends, to a qkv::Error from reading a data file with a loaded checkpoint, what that checkpoint reads.
template <class F>
void with_data_hint(const Task& task, F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const char* format = task.kind() == Kind::LM        ? "plain text"
                         : task.kind() == Kind::Seq2Seq ? "TSV lines source<TAB>target"
                                                        : "TSV lines label<TAB>text";
    throw Error(std::string(e.what()) + " [" + task.checkpoint_path + " holds a " + kind_name(task.kind()) +
                " model, which reads " + format + "]");
  }
}

}  // namespace

// --- train -----------------------------------------------------------------------------------------------

int run_train(const TrainArgs& a) {
  // The config file may name the device; --device overrides it. A resumed run takes --device or the CPU.
  const bool from_file = a.resume.empty() && !a.config.empty() && a.config != "tiny" && a.config != "small";
  const Setup file_setup = from_file && a.device.empty() ? resolve_setup(parse_kind(a.model.value), a.config) : Setup{};
  const Device device = choose_device(a.device, file_setup.device, a.config);
  set_precision(a.precision, device);
  set_threads(a.threads);
  if (a.steps.given && a.steps.value < 1)
    throw UsageError("--steps " + std::to_string(a.steps.value) + ": expected >= 1");
  // Where the checkpoint goes (--out, else the resumed file, written back, else model.safetensors), checked before
  // any work: a save that fails at the first evaluation would lose the steps before it.
  if (a.resume.empty() || !a.out.empty())
    check_output(a.out.empty() ? "model.safetensors" : a.out,
                 a.out.empty() ? "--out (default model.safetensors)" : "--out", {a.data, a.config, a.init});
  std::unique_ptr<Task> task;
  if (!a.init.empty() || !a.lora.empty()) {
    task = lora_task(a);
  } else if (!a.resume.empty()) {
    const auto fixed = [&](bool given, const char* flag, const char* what) {
      if (given)
        throw UsageError(std::string(flag) + " cannot be combined with --resume: the checkpoint fixes " + what);
    };
    fixed(!a.config.empty(), "--config", "the model and optimizer");
    fixed(a.batch.given, "--batch", "the batch size");
    fixed(a.seed.given, "--seed", "the seed");
    fixed(a.tokenizer.given || a.vocab_size.given, "--tokenizer/--vocab-size", "the tokenizer");
    const std::string text = read_text(a.data);
    task = Task::load(a.resume);
    if (a.model.given && parse_kind(a.model.value) != task->kind())
      throw Error(a.resume + ": holds a " + kind_name(task->kind()) + " model, but --model " + a.model.value +
                  " was given");
    with_data_hint(*task, [&] { task->set_data(a.data, text); });
    if (task->train.batch < 1) task->train.batch = 8;  // a checkpoint written by the library, not the tool
    if (a.lr.given) task->set_learning_rate(static_cast<float>(a.lr.value));
    if (a.non_finite.given) task->set_non_finite(parse_non_finite(a.non_finite.value, "--non-finite"));
    if (!a.steps.given && task->train.steps == 0) task->train.steps = 1000;
  } else {
    const Kind kind = parse_kind(a.model.value);
    Setup setup = resolve_setup(kind, a.config);
    if (a.tokenizer.value == "bpe") {
      if (kind != Kind::LM)
        throw UsageError("--tokenizer bpe: only an lm trains a BPE tokenizer (seq2seq and classifier use char)");
      if (!a.vocab_size.given) throw UsageError("--tokenizer bpe needs --vocab-size N (e.g. 2000)");
      setup.tokenizer = "bpe";
      setup.bpe_vocab_size = a.vocab_size.value;
    } else if (a.vocab_size.given) {
      throw UsageError("--vocab-size is for --tokenizer bpe (a char tokenizer's vocabulary is the text's characters)");
    }
    const int steps = a.steps.given ? a.steps.value : 1000;
    nlohmann::json opt = setup.optimizer;
    if (a.lr.given) opt["lr"] = a.lr.value;
    if (a.non_finite.given) opt["non_finite"] = a.non_finite.value;
    if (opt.value("schedule", "") == "cosine" && opt.value("total_steps", 0) == 0) opt["total_steps"] = steps;
    const std::string source = a.config.empty() || a.config == "tiny" || a.config == "small" ? "" : a.config;
    const OptimizerConfig optimizer = [&] {
      try {
        return optimizer_config_from_json(opt.dump());
      } catch (const Error& e) {
        throw Error((source.empty() ? std::string("--lr") : source) + ": " + e.what());
      }
    }();
    const uint64_t seed = a.seed.given ? a.seed.value : 1337;
    task = Task::create(kind, a.data, read_text(a.data), setup, source, seed, optimizer);
    task->train = {seed, setup.batch, steps, std::max(1, steps / 10)};
  }
  TrainState& t = task->train;
  if (a.batch.given) {
    if (a.batch.value < 1) throw UsageError("--batch " + std::to_string(a.batch.value) + ": expected >= 1");
    t.batch = a.batch.value;
  }
  if (a.steps.given) t.steps = a.steps.value;
  if (a.eval_every.given) {
    if (a.eval_every.value < 0) throw UsageError("--eval-every: expected >= 0 (0: only at the end)");
    t.eval_every = a.eval_every.value;
  }
  if (a.recompute.given) task->model().set_recompute(recompute_from_string(a.recompute.value, "--recompute"));
  task->check_trainable();
#if QKV_NCCL
  if (a.mpi && device == Device::CUDA) dist::select_local_gpu();  // one GPU per rank of a host
#endif
  task->to(device);
  const std::string out = !a.out.empty() ? a.out : !a.resume.empty() ? a.resume : "model.safetensors";
  // A skipped step drew its batch too: the next batch is the one after every step taken or skipped.
  const int start = task->step() + task->skipped_steps(), total = t.steps;

  // Under mpirun: every rank checks that the others were started alike, then trains its rows of each batch;
  // rank 0 alone logs, evaluates and writes the checkpoint.
  std::unique_ptr<Distributed> dist;
  if (a.mpi) {
    if (!(a.bucket_mb > 0.0 && a.bucket_mb <= 4096.0)) throw UsageError("--bucket-mb: expected a number in (0, 4096]");
    dist::DataParallelOptions o;
    o.bucket_bytes = std::max<size_t>(64, static_cast<size_t>(a.bucket_mb * 1024 * 1024));
    o.check_replicas = a.check_replicas;
    if (a.zero != 0 && a.zero != 1) throw UsageError("--zero " + std::to_string(a.zero) + ": expected 0 or 1");
    o.zero1 = a.zero == 1;
    std::unique_ptr<dist::Communicator> comm = dist::mpi_world();
    if (device == Device::CUDA) {
#if QKV_NCCL
      comm = dist::nccl_world(std::move(comm));  // the gradients stay on the GPU; NCCL sums them there
#else
      throw CollectiveError(
          "--device cuda under mpirun needs NCCL, and this build has none (a build with CUDA, MPI and NCCL's header "
          "under the CUDA toolkit has it); use --device cpu");
#endif
    }
    dist = std::make_unique<Distributed>(std::move(comm), o);
    const std::string text = read_text(a.data);
    const uint32_t crc = io::crc32({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
    dist->check_same({{"--model", kind_name(task->kind())},
                      {"--data (bytes, crc32)", detail::cat(text.size(), ", ", crc)},
                      {"--batch", std::to_string(t.batch)},
                      {"--steps", std::to_string(total)},
                      {"--seed", std::to_string(t.seed)},
                      {"--eval-every", std::to_string(t.eval_every)},
                      {"the first step (--resume)", std::to_string(start + 1)},
                      {"--device", device == Device::CUDA ? "cuda" : "cpu"},
                      {"--precision", device == Device::CUDA ? to_string(cuda_precision()) : "fp32"},
                      {"--bucket-mb", std::to_string(a.bucket_mb)},
                      {"--check-replicas", a.check_replicas ? "on" : "off"},
                      {"--zero", std::to_string(a.zero)},
                      {"the model config", task->config_json()},
                      {"the optimizer config", task->optimizer_json()}});
    if (t.batch < dist->size())
      throw CollectiveError(detail::cat("--batch ", t.batch, " is smaller than the ", dist->size(),
                                        " ranks: each rank needs at least one row of the global batch"));
    dist->attach(*task);
  }
  const bool lead = !dist || dist->lead();
  if (lead)
    std::fprintf(stderr, "qkv train: %s model, %zu parameters, %s%s; batch %d, steps %d..%d, checkpoint %s\n%s",
                 kind_name(task->kind()), task->num_parameters(), device_summary().c_str(),
                 device == Device::CUDA ? (std::string(", on cuda in ") + to_string(cuda_precision())).c_str() : "",
                 t.batch, start + 1, total, out.c_str(),
                 dist ? ("qkv train: data parallel over " + dist->describe(t.batch) + "\n").c_str() : "");
  if (lead && dist && a.zero == 1) {
    // The Adam moments are two floats per parameter; each rank now keeps its 1/N of them.
    const double whole = 2.0 * sizeof(float) * static_cast<double>(task->num_parameters()) / (1 << 20);
    std::fprintf(stderr, "qkv train: ZeRO-1: Adam moments %.2f MiB per rank instead of %.2f (%.2f MiB saved)\n",
                 whole / dist->size(), whole, whole - whole / dist->size());
  }
  if (start >= total) {
    if (lead) std::printf("nothing to do: the checkpoint is at step %d and --steps is %d\n", start, total);
    return 0;
  }

  Progress progress(start, total, a.log_every.given ? a.log_every.value : 10);
  // Rank 0 writes; under ZeRO-1 every rank first joins in gathering the Adam moments.
  const auto save = [&] {
    if (dist) dist->gather_moments();
    if (lead) task->save(out);
    if (lead) write_adapter(a, *task);
    if (dist) dist->shard_moments();
  };
  const auto evaluate = [&](int step) {
    if (!lead) return;
    Metrics m;
    try {
      m = task->evaluate(true, t.batch, 20);
    } catch (const NonFiniteError& e) {
      // Weights whose held-out loss is not finite are not saved (the last checkpoint stays what it was), unless
      // --non-finite skip asked to go on through such steps.
      check(task->model().optimizer().non_finite == NonFinite::Skip, "eval step ", step,
            ": the held-out loss is not finite (", e.what(),
            "; try a lower --lr); this step's checkpoint was not saved");
      say(&progress, "eval step %d: the held-out loss is not finite; saved anyway (--non-finite skip)\n", step);
      return;
    }
    if (m.count == 0)
      say(&progress, "eval step %d: no held-out data (the file is too small for a 10%% split)\n", step);
    else
      say(&progress, "eval step %d: loss %.6f  perplexity %.4f  accuracy %.4f\n", step, m.loss, m.perplexity,
          m.accuracy);
  };
  catch_signals(!dist);
  float loss = 0.f;
  int step = start;
  bool saved = false, evaluated = false;
  // Alone, each step is queued (queue_train_step) and reported one step late: on a GPU the next batch is made and
  // queued while the step runs. Everything below that reads the model (evaluation, saving) reports it first.
  struct Queued {
    int step;
    StepLoss loss;
    long long tokens;
  };
  std::optional<Queued> queued;
  // Counted here: the model's count would settle the step queued behind the one reported.
  int skipped_so_far = task->skipped_steps();
  const auto report = [&](int at, float l, bool skipped, long long tokens) {
    if (lead && skipped) {
      progress.clear();
      std::fprintf(stderr, "step %d skipped: %s is not finite; the weights are unchanged (%d skipped so far)\n", at,
                   std::isfinite(l) ? "the gradient norm" : "the loss", ++skipped_so_far);
    }
    if (lead) progress.update(at, l, tokens);
  };
  const auto report_queued = [&] {
    if (!queued) return;
    const Queued q = *queued;
    queued.reset();
    loss = q.loss.get();  // throws as train_step would (NonFinite::Error)
    report(q.step, loss, q.loss.skipped(), q.tokens);
  };
  while (step < total) {
    ++step;
    const Batch b = task->train_batch(t.seed, step, t.batch);
    bool stop = g_signal != 0;
    if (dist) {
      const Distributed::Result r = dist->train_step(*task, b, stop);
      loss = r.loss;
      stop = r.stop;  // every rank stops at the same step when any was interrupted
      report(step, loss, task->last_step_skipped(), b.tokens);
    } else {
      const StepLoss l = task->queue_train_step(b);
      report_queued();
      queued = Queued{step, l, b.tokens};
    }
    saved = evaluated = false;
    const bool eval_now = t.eval_every > 0 && step % t.eval_every == 0;
    if (eval_now || stop || step == total) report_queued();
    if (eval_now) {
      // Evaluation runs forward passes without dropout, at the same steps in a resumed run.
      evaluate(step);
      save();
      saved = evaluated = true;
    }
    if (stop && step < total) {
      if (!saved) save();
      if (!lead) return 128 + SIGINT;
      say(&progress, "interrupted at step %d/%d: loss %.6f, checkpoint saved to %s\n", step, total, loss, out.c_str());
      std::fprintf(stderr, "continue with: qkv train --data %s --resume %s\n", a.data.c_str(), out.c_str());
      return 128 + (g_signal != 0 ? static_cast<int>(g_signal) : SIGINT);
    }
  }
  if (!evaluated) evaluate(step);  // before the save: a non-finite evaluation keeps the last checkpoint
  if (!saved) save();
  if (!lead) return 0;
  say(&progress, "done step %d/%d: loss %.6f, checkpoint saved to %s\n", step, total, loss, out.c_str());
  if (task->skipped_steps() > 0)
    std::fprintf(stderr, "%d steps were skipped for a non-finite loss or gradient (--non-finite skip)\n",
                 task->skipped_steps());
  return 0;
}

// --- eval ------------------------------------------------------------------------------------------------

int run_eval(const EvalArgs& a) {
  const Device device = choose_device(a.device);
  set_precision(a.precision, device);
  set_threads(a.threads);
  if (a.batch.given && a.batch.value < 1)
    throw UsageError("--batch " + std::to_string(a.batch.value) + ": expected >= 1");
  const std::string text = read_text(a.data);
  const auto task = Task::load(a.ckpt);
  task->to(device);
  with_data_hint(*task, [&] { task->set_data(a.data, text); });
  const int batch = a.batch.given ? a.batch.value : std::max(task->train.batch, 16);
  const Metrics m = [&] {
    try {
      return task->evaluate(false, batch, 0);
    } catch (const NonFiniteError& e) {
      throw Error(a.ckpt + ": " + e.what());  // the checkpoint's weights, not the data
    }
  }();
  check(m.count > 0, a.data, ": nothing to evaluate: expected at least two tokens");
  std::printf("loss %.6f  perplexity %.4f  accuracy %.4f  (%lld %s of %s)\n", m.loss, m.perplexity, m.accuracy, m.count,
              task->kind() == Kind::Classifier ? "examples" : "target tokens", a.data.c_str());
  return 0;
}

// --- info ------------------------------------------------------------------------------------------------

std::string io_detect_format(const std::string& text) {
  return detect_format(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

namespace {

// A Hugging Face model folder: what import_pretrained reads from it (the weights streamed into a model, which checks
// every tensor as the import does).
int info_folder(const InfoArgs& a) {
  ImportedWeights r;
  const size_t params = load_pretrained(a.ckpt, {}, Device::CPU, &r)->num_parameters();
  // Read before any row is printed, so that a refusal is the whole output; named by the folder, as import names it.
  const std::optional<Tokenizer> tok = folder_tokenizer(a.ckpt, r.tokenizer_files);
  const auto c = nlohmann::json::parse(r.config_json);
  const auto row = [](const char* key, const std::string& value) { std::printf("%-12s %s\n", key, value.c_str()); };
  row("folder", a.ckpt);
  row("model", "a GPT-2 (Hugging Face) checkpoint: " + c.at("layers").dump() + " layers, " + c.at("heads").dump() +
                   " heads, n_embd " + c.at("d_model").dump() + ", vocabulary " + c.at("vocab_size").dump() +
                   ", context " + c.at("context").dump() + ", activation " + c.at("activation").get<std::string>());
  row("config", r.config_json);
  row("parameters", std::to_string(params));
  row("tokenizer",
      !tok ? std::string("none found (qkv generate then takes --prompt-ids)")
           : "byte-level BPE, " + std::to_string(tok->size()) + " tokens, from " +
                 (r.tokenizer_files.count("tokenizer.json") ? "tokenizer.json" : "vocab.json + merges.txt"));
  for (const auto& note : r.notes) row("note", note);
  std::printf("qkv import %s OUT converts it into a qkv checkpoint\n", a.ckpt.c_str());
  return 0;
}

}  // namespace

int run_info(const InfoArgs& a) {
  if (std::filesystem::is_directory(a.ckpt)) return info_folder(a);
  const std::string text = read_text(a.ckpt);
  const SafetensorsFile f = [&] {
    try {
      return parse_safetensors(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    } catch (const Error& e) {
      throw Error(a.ckpt + ": " + e.what());
    }
  }();
  const auto& meta = f.metadata;
  const auto row = [](const char* key, const std::string& value) { std::printf("%-12s %s\n", key, value.c_str()); };
  row("file", a.ckpt + " (" + std::to_string(text.size()) + " bytes)");
  const auto get = [&](const char* key) { return meta.count(key) ? meta.at(key) : std::string(); };
  if (meta.count("qkv.model")) {
    row("model", get("qkv.model") + " (qkv " + get("qkv.version") + ")");
    const std::string skipped = get("qkv.skipped_steps");
    row("step", get("qkv.step") + (get("qkv.optimizer_state") == "true" ? " (with optimizer state)" : "") +
                    (!skipped.empty() && skipped != "0" ? "; " + skipped + " skipped (non-finite)" : ""));
    row("config", get("qkv.config"));
    row("optimizer", get("qkv.optimizer"));
  } else {
    std::string format;
    try {
      format = io_detect_format(text);
    } catch (const Error&) {
    }
    row("model", "not a qkv checkpoint (no \"qkv.model\" metadata): a plain safetensors file" +
                     (format.empty() || format == "qkv" ? std::string()
                      : format == "gpt2"
                          ? ", a GPT-2 (Hugging Face) state dict (qkv import on its folder, with config.json, "
                            "converts it)"
                          : ", a state dict in " + format + " names (qkv import --from " + format +
                                (format == "seed004" ? std::string(" converts it)")
                                                     : " --heads N converts it: its shapes cannot tell the heads)")));
  }
  for (const char* key : {"qkv.tokenizer", "qkv.tokenizer.target"}) {
    if (!meta.count(key)) continue;
    try {
      const Tokenizer tok = Tokenizer::from_json(meta.at(key));
      row(key == std::string("qkv.tokenizer") ? "tokenizer" : "tokenizer.t",
          tok.kind() + ", " + std::to_string(tok.size()) + " tokens");
    } catch (const Error& e) {
      row("tokenizer", std::string("unreadable: ") + e.what());
    }
  }
  if (meta.count("qkv.labels")) row("labels", get("qkv.labels"));
  if (meta.count("qkv.train")) row("train", get("qkv.train"));
  info_lora(f);
  for (const auto& [key, value] : meta)
    if (key.rfind("qkv.", 0) != 0 && key != "format")
      row(key.c_str(), value.size() > 100 ? value.substr(0, 100) + "..." : value);
  // A quantized checkpoint ("qkv.quantized", io/checkpoint.h): each packed tensor's format and matrix shape; its
  // stored tensor holds the rows' bytes and "<name>.scales" their scales, neither counted as parameters.
  std::map<std::string, std::pair<std::string, long long>> packed;  // name -> format, the matrix's numel
  if (meta.count("qkv.quantized")) {
    try {
      const auto j = nlohmann::json::parse(meta.at("qkv.quantized"));
      for (const auto& [name, v] : j.items())
        packed[name] = {v.at("format").get<std::string>(),
                        v.at("shape").at(0).get<long long>() * v.at("shape").at(1).get<long long>()};
    } catch (const nlohmann::json::exception& e) {
      throw Error(a.ckpt + ": \"qkv.quantized\" is malformed: " + e.what());
    }
  }
  const auto scales_of = [&](const std::string& n) {
    return n.size() > 7 && n.compare(n.size() - 7, 7, ".scales") == 0 && packed.count(n.substr(0, n.size() - 7));
  };
  long long params = 0;
  size_t weights = 0, moments = 0, name_width = 4, weight_bytes = 0;
  std::map<std::string, std::pair<int, size_t>> by_format;  // format -> tensors, bytes (rows and scales)
  const auto is_moment = [](const std::string& n) { return n.rfind("optimizer.", 0) == 0; };
  for (const TensorEntry& t : f.tensors) {
    if (is_moment(t.name)) {
      ++moments;
      if (!a.all) continue;
    } else {
      weight_bytes += t.bytes.size();
      const auto p = packed.find(t.name);
      const bool scales = scales_of(t.name);
      const std::string format = p != packed.end()  ? p->second.first
                                 : scales           ? packed.at(t.name.substr(0, t.name.size() - 7)).first
                                 : t.dtype == "F32" ? "f32"
                                                    : t.dtype;
      by_format[format].first += !scales;
      by_format[format].second += t.bytes.size();
      if (!scales) {
        ++weights;
        params += p != packed.end() ? p->second.second : t.numel();
      }
    }
    name_width = std::max(name_width, t.name.size());
  }
  row("parameters", std::to_string(params));
  std::string formats;
  for (const auto& [format, n] : by_format)
    formats += (formats.empty() ? "" : ", ") + format + ": " + std::to_string(n.first) + " tensors, " +
               std::to_string(n.second) + " bytes";
  row("weights", std::to_string(weight_bytes) + " bytes (" + formats + ")");
  const auto activations = f.metadata.find("qkv.activations");
  if (activations != f.metadata.end())
    row("activations", activations->second + " (decoding's products with the int8 / q4 weights: qkv quantize)");
  row("tensors", std::to_string(weights) + " weights" +
                     (moments ? " + " + std::to_string(moments) + " optimizer moments" +
                                    (a.all ? "" : " (not listed; --all lists them)")
                              : ""));
  std::printf("\n%-*s  %-5s  %-16s  %-12s  %s\n", static_cast<int>(name_width), "name", "dtype", "shape", "numel",
              "format");
  for (const TensorEntry& t : f.tensors) {
    if (is_moment(t.name) && !a.all) continue;
    std::string shape = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
    shape += "]";
    const auto p = packed.find(t.name);
    const std::string format = p != packed.end()   ? p->second.first + " (" + std::to_string(t.bytes.size()) + " bytes)"
                               : scales_of(t.name) ? "scales"
                                                   : "";
    std::printf("%-*s  %-5s  %-16s  %-12lld  %s\n", static_cast<int>(name_width), t.name.c_str(), t.dtype.c_str(),
                shape.c_str(), static_cast<long long>(t.numel()), format.c_str());
  }
  return 0;
}

// --- bench -----------------------------------------------------------------------------------------------

namespace {

// Seconds per call of fn: one warm-up call, then calls until `seconds` have passed (at least one).
template <class F>
double time_per_call(double seconds, F&& fn) {
  fn();
  int calls = 0;
  const auto t0 = Clock::now();
  do {
    fn();
    ++calls;
  } while (seconds_since(t0) < seconds);
  return seconds_since(t0) / calls;
}

}  // namespace

int run_bench(const BenchArgs& a) {
  if (a.steps < 1) throw UsageError("--steps " + std::to_string(a.steps) + ": expected >= 1");
  if (!(a.seconds > 0.0)) throw UsageError("--seconds: expected a number > 0");
  set_threads(a.threads);
  const int threads = num_threads();
  std::printf("qkv %s bench: %s\n\n", QKV_VERSION, device_summary().c_str());

  std::printf("%-22s %8s %10s %9s\n", "gemm M x N x K", "threads", "ms", "GFLOP/s");
  struct Shape {
    int M, N, K;
  };
  // Square products, then the char GPT's feed-forward product (B*T = 768 rows, C = 128 -> 4C = 512).
  for (const Shape s : {Shape{256, 256, 256}, Shape{512, 512, 512}, Shape{768, 512, 128}}) {
    const auto A = std::vector<float>(static_cast<size_t>(s.M) * s.K, 0.5f);
    const auto B = std::vector<float>(static_cast<size_t>(s.K) * s.N, 0.25f);
    std::vector<float> C(static_cast<size_t>(s.M) * s.N);
    const double t = time_per_call(a.seconds, [&] {
      kernels::gemm(false, false, s.M, s.N, s.K, 1.f, A.data(), s.K, B.data(), s.N, 0.f, C.data(), s.N);
    });
    const std::string name = std::to_string(s.M) + " x " + std::to_string(s.N) + " x " + std::to_string(s.K);
    std::printf("%-22s %8d %10.3f %9.1f\n", name.c_str(), threads, t * 1e3, 2.0 * s.M * s.N * s.K / t * 1e-9);
    std::fflush(stdout);
  }

  // The char GPT of nanoGPT's CPU recipe on random tokens (the speed does not depend on the text).
  LanguageModelConfig c;
  c.vocab_size = 65;
  c.context = 64;
  c.d_model = 128;
  c.heads = 4;
  c.layers = 4;
  c.bias = false;
  const int B = 12, T = c.context;
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  Rng rng(1);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(rng.next_u64() % 65);
    tg[i] = static_cast<int32_t>(rng.next_u64() % 65);
  }
  std::printf("\n%-22s %8s %10s %9s\n", "char GPT train step", "threads", "ms", "tokens/s");
  std::vector<int> counts;
  for (int n = 1; n < threads; n *= 2) counts.push_back(n);
  counts.push_back(threads);
  for (int n : counts) {
    set_num_threads(n);
    LanguageModel lm(c);
    lm.train_step(in, tg, B, T);  // warm-up: plans the workspace
    const auto t0 = Clock::now();
    for (int s = 0; s < a.steps; ++s) lm.train_step(in, tg, B, T);
    const double t = seconds_since(t0) / a.steps;
    std::printf("%-22s %8d %10.2f %9.0f\n", "4L d128 ctx64 batch12", n, t * 1e3, B * T / t);
    std::fflush(stdout);
  }
  set_num_threads(threads);
  return 0;
}

}  // namespace qkv::cli
