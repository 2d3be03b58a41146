// The qkv tool's `generate` command (commands.h): a prompt continued by an lm checkpoint or a Hugging Face GPT-2 folder
// (text through its tokenizer, or token ids), or translated by a seq2seq checkpoint, written to stdout as it comes.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "lora_commands.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/sampling.h"
#include "qkv/tokenizer.h"
#include "task.h"

namespace qkv::cli {

namespace {

// "1,2,3" or "1 2 3" as ids; UsageError naming the flag for anything else.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ') {
      ++i;
      continue;
    }
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(text.substr(i), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || v < 0 || v > INT32_MAX || text[i] == '+' || text[i] == '-')
      throw UsageError("--prompt-ids \"" + text + "\": expected token ids >= 0 separated by commas or spaces");
    ids.push_back(static_cast<int32_t>(v));
    i += used;
  }
  if (ids.empty()) throw UsageError("--prompt-ids \"" + text + "\": expected at least one token id");
  return ids;
}

// The lm of --ckpt or --model continued from token ids: the new ids written as they come.
// A sample drawn with a seed the user did not give says which, so that it can be drawn again; greedy decoding (and a
// seq2seq's, which does not sample) draws nothing.
void say_seed(const GenerateArgs& a, const SamplingOptions& o) {
  if (!a.seed.given && o.temperature > 0.f)
    std::fprintf(stderr, "seed %llu (pass --seed to repeat this sample)\n", static_cast<unsigned long long>(o.seed));
}

int generate_ids(const GenerateArgs& a, const SamplingOptions& o, Device device) {
  if (a.beam != 1) throw UsageError("--beam: only a seq2seq checkpoint decodes with beams; this is a language model");
  if (!a.stop.empty()) throw UsageError("--stop: stop characters need a tokenizer; with --prompt-ids there is none");
  const std::vector<int32_t> prompt = parse_ids(a.prompt_ids);
  const std::unique_ptr<LanguageModel> m =
      a.model.empty() ? LanguageModel::load_file(a.ckpt) : load_pretrained(a.model, {}, device);
  if (a.model.empty()) m->to(device);
  load_generate_adapter(a.adapter, *m);
  const int V = m->config().vocab_size;
  for (int32_t id : prompt)
    if (id >= V)
      throw UsageError("--prompt-ids: token id " + std::to_string(id) + " is out of range: the vocabulary has " +
                       std::to_string(V) + " ids (0 to " + std::to_string(V - 1) + ")");
  // A folder's end-of-text ends generation unprinted (as transformers' generate stops there), unless --ignore-eos.
  std::vector<int32_t> eos;
  if (!a.model.empty() && !a.ignore_eos) {
    eos = pretrained_eos_ids(a.model, -1);
    if (eos.empty())
      if (const std::optional<Tokenizer> tok = pretrained_tokenizer(a.model); tok && tok->eos_id() >= 0)
        eos.push_back(tok->eos_id());
  }
  say_seed(a, o);
  bool first = true;
  m->generate(prompt, o, [&](int32_t token) {
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) return false;
    std::printf(first ? "%d" : " %d", token);
    first = false;
    std::fflush(stdout);
    return true;
  });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace

int run_generate(const GenerateArgs& a) {
  const Device device = choose_device(a.device);
  set_precision(a.precision, device);
  set_threads(a.threads);
  SamplingOptions o;
  o.max_new_tokens = a.max_tokens;
  o.temperature = static_cast<float>(a.temperature);
  o.top_k = a.top_k;
  o.top_p = static_cast<float>(a.top_p);
  o.repetition_penalty = static_cast<float>(a.repetition_penalty);
  try {
    validate(o);
  } catch (const Error& e) {
    // The core names the field; the user typed the flag.
    const std::string m = e.what();
    const char* flag = m.rfind("max_new_tokens", 0) == 0 ? "--max-tokens"
                       : m.rfind("temperature", 0) == 0  ? "--temperature"
                       : m.rfind("top_k", 0) == 0        ? "--top-k"
                       : m.rfind("top_p", 0) == 0        ? "--top-p"
                                                         : "--repetition-penalty";
    throw UsageError(std::string(flag) + ": " + m);
  }
  o.seed = a.seed.given ? a.seed.value : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (a.ckpt.empty() == a.model.empty()) throw UsageError("give the model: --ckpt FILE or --model DIR");
  if (a.ignore_eos && a.model.empty())
    throw UsageError(
        "--ignore-eos: a checkpoint has no end-of-text token that stops generation; it applies to --model");
  if (!a.prompt_given && a.prompt_ids.empty()) throw UsageError("give the prompt: --prompt TEXT or --prompt-ids IDS");
  if (!a.model.empty() && !std::filesystem::is_directory(a.model))
    throw UsageError("--model " + a.model + (std::filesystem::exists(a.model) ? " is a file" : " does not exist") +
                     ": --model takes a Hugging Face model folder (config.json + model.safetensors); a qkv checkpoint "
                     "is --ckpt FILE");
  if (!a.prompt_ids.empty()) return generate_ids(a, o, device);
  if (!a.model.empty() && !std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json") &&
      !std::filesystem::exists(std::filesystem::path(a.model) / "vocab.json"))
    throw UsageError("--prompt: " + a.model +
                     " has no tokenizer (tokenizer.json, or vocab.json + merges.txt): give the prompt as token ids "
                     "(--prompt-ids)");
  const auto task = a.model.empty() ? Task::load(a.ckpt) : Task::load_pretrained(a.model, a.ignore_eos);
  if (task->kind() == Kind::Classifier) task->generate(a.prompt, o, a.stop, a.beam, 0.f, {});  // refuses, naming it
  load_generate_adapter(a.adapter, task->model());
  task->to(device);
  if (task->kind() == Kind::LM) say_seed(a, o);
  // A continuation follows its prompt; a translation goes on a line of its own, after the source and " -> ".
  std::fputs(a.prompt.c_str(), stdout);
  if (task->kind() == Kind::Seq2Seq) std::fputs(" -> ", stdout);
  std::fflush(stdout);
  task->generate(a.prompt, o, a.stop, a.beam, static_cast<float>(a.length_penalty), [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace qkv::cli
