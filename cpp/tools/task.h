#pragma once
// The qkv tool's view of a model: one of the three models together with the tokenizers that turn a data
// file into its batches, and the checkpoint metadata that lets `generate`, `eval` and `train --resume` find
// them again. A checkpoint written by `qkv train` is an ordinary qkv checkpoint (the models load it) with
// these extra "__metadata__" keys:
//   "qkv.tokenizer"         the input tokenizer's JSON (qkv/tokenizer.h): the text of lm and classifier,
//                           the source of seq2seq
//   "qkv.tokenizer.target"  seq2seq: the target tokenizer's JSON
//   "qkv.labels"            classifier: the class names in class-id order, a JSON array of strings
//   "qkv.train"             {"seed", "batch", "steps", "eval_every"}: what `train --resume` continues with
//   "qkv.imported_from"     the format of the file `qkv import` read ("gpt2" for a Hugging Face GPT-2 folder), kept
//                           through `qkv train --init/--resume`: a LoRA adapter of such a model is saved in GPT-2's
//                           module names by default (lora_commands.h)
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/import.h"
#include "qkv/model.h"
#include "qkv/optimizer.h"
#include "qkv/sampling.h"
#include "qkv/tensor.h"
#include "qkv/tokenizer.h"

namespace qkv::cli {

// A mistake in the command line (exit status 2); every other failure is a qkv::Error (exit status 1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Kind { LM, Seq2Seq, Classifier };
Kind parse_kind(const std::string& name);  // "lm", "seq2seq", "classifier"
const char* kind_name(Kind kind);          // the same names
const char* checkpoint_kind(Kind kind);    // "qkv.model" in a checkpoint: "language_model", "seq2seq", "classifier"

// The whole file as bytes; qkv::Error naming the path when it cannot be read.
std::string read_text(const std::string& path);

// The ids that end a Hugging Face model's text, as transformers' generate takes them: config.json's eos_token_id
// (an id or a list of ids) in the folder `dir`, else `tokenizer_eos` (the tokenizer's <|endoftext|>; -1 = none).
std::vector<int32_t> pretrained_eos_ids(const std::string& dir, int tokenizer_eos);
// pretrained_tokenizer(files) (qkv/import.h) for the Hugging Face folder `dir` that `files` came from, a
// malformed tokenizer named by the folder; nullopt when the folder has no tokenizer files.
std::optional<Tokenizer> folder_tokenizer(const std::string& dir, const std::map<std::string, std::string>& files);

// Refuses, before any work, an output path `out` (the command line calls it `flag`) that is a folder, whose folder
// does not exist, or that would replace one of `inputs` (the commands' input files and folders; "" skipped): the
// same file, or a file an input model or adapter folder is read from (model.safetensors, config.json, the tokenizer
// files...). UsageError naming both.
void check_output(const std::string& out, const std::string& flag, const std::vector<std::string>& inputs);

// A qkv checkpoint's metadata less what a checkpoint writes itself (saving the model again writes those anew): its
// tokenizers, labels, training settings and the user's keys.
std::map<std::string, std::string> carried_metadata(const std::map<std::string, std::string>& metadata);

// A model as qkv quantize and qkv merge read their input, on the CPU: a pretrained folder as qkv import reads it
// (its tokenizer and origin kept in `metadata`, so that qkv generate works on what they write), or a qkv checkpoint
// of any kind, whose metadata (tokenizers, labels, training settings, the user's keys) is kept less what a
// checkpoint writes itself (saving it again writes those anew).
struct ModelFile {
  std::unique_ptr<Model> model;
  std::map<std::string, std::string> metadata;
};
// `weights`: how a folder's weights are held (qkv/import.h); a checkpoint ignores it.
ModelFile read_model(const std::string& path, PretrainedWeights weights = PretrainedWeights::F32);

// A model configuration before the data fills in the vocabulary (and, for seq2seq and classifier, the
// context when it is not given): the model's and optimizer's JSON fields and the batch size.
struct Setup {
  nlohmann::json model;
  nlohmann::json optimizer;
  int batch = 0;
  std::string device;  // "cpu", "cuda", or "" when the file does not say
  // lm: "char" (the text's distinct characters) or "bpe" (byte-level BPE trained on the text to
  // bpe_vocab_size tokens, <|endoftext|> included: Tokenizer::train_bpe). Set by `qkv train --tokenizer`.
  std::string tokenizer = "char";
  int bpe_vocab_size = 0;
};
// `config` is a preset name ("tiny", "small") or a JSON file {"preset", "model", "optimizer", "batch", "device"}
// whose fields override the preset's (default "tiny"). UsageError for an unknown preset name.
Setup resolve_setup(Kind kind, const std::string& config);
// The presets as --help shows them.
std::string describe_presets();

// What `qkv train --resume` continues with.
struct TrainState {
  uint64_t seed = 1337;
  int batch = 0;
  int steps = 0;  // the planned total
  int eval_every = 0;
};

// One batch in the layout of the task's model: lm (inputs, targets); seq2seq (src, tgt_in, tgt_out);
// classifier (tokens, labels).
struct Batch {
  std::vector<int32_t> a, b, c;
  int rows = 0, len_a = 0, len_b = 0;
  long long tokens = 0;  // positions processed, for tokens/s
};

// Rows [first, first + n) of a batch (every field holds rows of equal width).
Batch rows_of(const Batch& b, int first, int n);

class Task {
 public:
  virtual ~Task() = default;

  // A new model for the data file `path` (its contents `text`), configured by `setup` with the vocabulary
  // sizes (and, where not given, the context) taken from the data. `source` names the setup in errors.
  static std::unique_ptr<Task> create(Kind kind, const std::string& path, const std::string& text, const Setup& setup,
                                      const std::string& source, uint64_t seed, const OptimizerConfig& optimizer);
  // A checkpoint written by `qkv train`: qkv::Error naming the path for anything else.
  static std::unique_ptr<Task> load(const std::string& path);
  // A Hugging Face GPT-2 folder (qkv/import.h: load_pretrained) with its BPE tokenizer (tokenizer.json, or
  // vocab.json + merges.txt); qkv::Error naming the folder when it has no tokenizer.
  // Generation stops at the folder's end-of-text ids (pretrained_eos_ids), unprinted, unless ignore_eos.
  static std::unique_ptr<Task> load_pretrained(const std::string& dir, bool ignore_eos = false);

  virtual Kind kind() const = 0;
  // Encodes a data file with this task's tokenizers; the last 10% of it (of the text for lm, of the
  // examples otherwise) is the held-out split. Errors name the file (and line for TSV).
  virtual void set_data(const std::string& path, const std::string& text) = 0;
  // qkv::Error naming the data file when it is too small to train on.
  virtual void check_trainable() const = 0;
  // The training batch of a step: a function of (seed, step) only, so a resumed run sees the same batches.
  virtual Batch train_batch(uint64_t seed, int step, int batch) const = 0;
  virtual float train_step(const Batch& batch) = 0;
  // The step queued, its loss read later (the model's queue_train_step): on a GPU the next batch is made while it
  // runs.
  virtual StepLoss queue_train_step(const Batch& batch) = 0;
  // Data-parallel training (distributed.h): the targets of a batch that count in its mean loss (not padding);
  // one step on this rank's part of a global batch, its gradient weighted by `weight` (its share of the global
  // count) and summed across ranks by the model's gradient sync before the update; returns the part's mean loss.
  virtual long long counted(const Batch& batch) const = 0;
  virtual float train_part(const Batch& part, float weight) = 0;
  void set_gradient_sync(dist::GradientSync* sync) { model().set_gradient_sync(sync); }
  virtual std::string optimizer_json() const = 0;
  // Loss, accuracy and perplexity over the held-out split or the whole data, `batch` rows at a time and at
  // most max_batches batches (0: all). count is 0 when there is nothing to evaluate.
  virtual Metrics evaluate(bool held_out, int batch, int max_batches) = 0;
  // The task's model, for what every model kind has (qkv/model.h).
  virtual Model& model() const = 0;
  int step() const { return model().step(); }  // optimizer steps taken
  // Steps skipped under NonFinite::Skip (each drew its batch, so a run's next batch is step() + this), and
  // whether the last train_step was one.
  int skipped_steps() const { return model().skipped_steps(); }
  bool last_step_skipped() const { return model().last_step_skipped(); }
  void set_non_finite(NonFinite policy) { model().set_non_finite(policy); }
  size_t num_parameters() const { return model().num_parameters(); }
  // Moves the model to `device` (qkv::Error naming why when it cannot be used).
  void to(Device device) { model().to(device); }
  void set_learning_rate(float lr) { model().set_learning_rate(lr); }
  virtual std::string config_json() const = 0;
  // Streams the text that follows `prompt` to on_text, a piece per token (on_text returns false to stop):
  // lm samples with `options` (stop_chars: characters that end generation); seq2seq decodes up to
  // options.max_new_tokens target tokens with beam search of width `beam` (1: greedy) and GNMT's
  // length_penalty. qkv::Error for a classifier; UsageError naming the flag for options that do not fit the
  // checkpoint (a beam for an lm).
  virtual void generate(const std::string& prompt, const SamplingOptions& options, const std::string& stop_chars,
                        int beam, float length_penalty, const std::function<bool(const std::string&)>& on_text);

  // Writes the checkpoint (weights, optimizer state, tokenizers, train state) atomically to `path`.
  void save(const std::string& path);

  TrainState train;
  std::string checkpoint_path;  // where the task was loaded from ("" for a new one), for messages
  std::string imported_from;    // "qkv.imported_from" (above): "gpt2" for a GPT-2 folder's model, "" for qkv's own
  std::string base_model;       // the GPT-2 folder a task was loaded from (load_pretrained), "" otherwise

 protected:
  virtual std::map<std::string, std::string> metadata() const = 0;
};

}  // namespace qkv::cli
