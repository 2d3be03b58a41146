// The qkv tool's LoRA commands (lora_commands.h): fine-tuning a pretrained model's adapters, merging an adapter into
// its base, and the adapter files (qkv/lora_files.h) the commands read and write.
#include "lora_commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "io/checkpoint.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/lora.h"
#include "qkv/lora_files.h"
#include "qkv/seq2seq.h"
#include "qkv/tokenizer.h"

namespace qkv::cli {

std::unique_ptr<Task> lora_task(const TrainArgs& a) {
  if (a.init.empty()) throw UsageError("--lora needs --init MODEL: the pretrained model whose adapters train");
  if (a.lora.empty())
    throw UsageError(
        "--init MODEL starts LoRA fine-tuning: give --lora (e.g. rank=8,alpha=16,targets=qkv+out); "
        "a checkpoint trains on whole with --resume");
  const auto fixed = [&](bool given, const char* flag, const char* what) {
    if (given) throw UsageError(std::string(flag) + " cannot be combined with --init: " + what);
  };
  fixed(!a.resume.empty(), "--resume", "a checkpoint with adapters continues with --resume alone");
  fixed(!a.config.empty(), "--config", "the model is --init's (its optimizer too; --lr sets the learning rate)");
  fixed(a.tokenizer.given || a.vocab_size.given, "--tokenizer/--vocab-size", "the model's tokenizer is --init's");
  const LoraOptions options = [&] {
    try {
      return lora_options_from_string(a.lora);
    } catch (const Error& e) {
      const std::string m = e.what();  // the parser names --lora itself, the validation the option
      throw UsageError(m.rfind("--lora", 0) == 0 ? m : "--lora " + a.lora + ": " + m);
    }
  }();
  if (a.adapter_names == "gpt2")
    for (const std::string& t : options.targets)
      if (t == "q" || t == "k" || t == "v")
        throw UsageError(
            "--adapter-names gpt2: GPT-2 has no separate " + t +
            " module (its c_attn projects q, k and v together): use the target qkv, or --adapter-names qkv");
  const std::string text = read_text(a.data);
  std::unique_ptr<Task> task =
      std::filesystem::is_directory(a.init) ? Task::load_pretrained(a.init) : Task::load(a.init);
  if (a.model.given && parse_kind(a.model.value) != task->kind())
    throw Error(a.init + ": holds a " + kind_name(task->kind()) + " model, but --model " + a.model.value +
                " was given");
  if (task->model().has_lora())  // not check(): its arguments are all evaluated, lora_options() throws without
    throw Error(a.init + ": the model already has LoRA adapters (" + to_string(task->model().lora_options()) +
                "): continue training them with --resume " + a.init +
                ", or fold them into the base first with qkv merge");
  try {
    task->set_data(a.data, text);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " [" + a.init + " holds a " + kind_name(task->kind()) + " model]");
  }
  io::with_path(a.init, [&] { task->model().add_lora(options); });
  if (a.lr.given) task->set_learning_rate(static_cast<float>(a.lr.value));
  if (a.non_finite.given) task->set_non_finite(parse_non_finite(a.non_finite.value, "--non-finite"));
  const int steps = a.steps.given ? a.steps.value : 1000;
  task->train = {a.seed.given ? a.seed.value : 1337, 8, steps, std::max(1, steps / 10)};
  task->checkpoint_path = a.init;
  return task;
}

namespace {

// --adapter-names, or the default: GPT-2's for a language model from a GPT-2 folder whose targets GPT-2 has (no
// separate q, k, v), else qkv's.
AdapterNames adapter_names(const TrainArgs& a, Task& task) {
  if (a.adapter_names == "qkv") return AdapterNames::Qkv;
  if (a.adapter_names == "gpt2") return AdapterNames::Gpt2;
  if (!a.adapter_names.empty()) throw UsageError("--adapter-names " + a.adapter_names + ": expected qkv or gpt2");
  if (task.imported_from != "gpt2" || task.kind() != Kind::LM) return AdapterNames::Qkv;
  for (const std::string& t : task.model().lora_options().targets)
    if (t == "q" || t == "k" || t == "v") return AdapterNames::Qkv;
  return AdapterNames::Gpt2;
}

}  // namespace

void write_adapter(const TrainArgs& a, Task& task) {
  if (a.adapter_out.empty()) return;
  check(task.model().has_lora(), "--adapter-out ", a.adapter_out, ": the model has no LoRA adapters (train with ",
        "--lora and --init)");
  const Device device = task.model().device();
  if (device != Device::CPU) task.to(Device::CPU);  // the adapters are read through the host
  save_adapter_dir(task.model(), a.adapter_out, adapter_names(a, task), task.base_model);
  if (device != Device::CPU) task.to(device);
}

void load_generate_adapter(const std::string& dir, Model& model) {
  if (dir.empty()) return;
  const Device device = model.device();
  if (device != Device::CPU) model.to(Device::CPU);
  load_adapter_dir(model, dir);
  if (device != Device::CPU) model.to(device);
}

void info_lora(const SafetensorsFile& f) {
  const auto it = f.metadata.find("qkv.lora");
  if (it == f.metadata.end()) return;
  long long params = 0;
  int tensors = 0;
  for (const TensorEntry& t : f.tensors) {
    const bool moment = t.name.rfind("optimizer.", 0) == 0;
    if (moment || t.name.find(".lora_") == std::string::npos) continue;
    ++tensors;
    params += t.numel();
  }
  std::printf("%-12s %s: %d tensors, %lld parameters (the base is frozen)\n", "lora", it->second.c_str(), tensors,
              params);
}

// --- merge ------------------------------------------------------------------------------------------------------

int run_merge(const MergeArgs& a) {
  check_output(a.out, "OUT", {a.model, a.adapter});
  auto [model, meta] = read_model(a.model);
  meta.erase("qkv.train");  // the merged model is a new starting point, not a run to resume
  const std::map<std::string, WeightFormat> formats = model->weight_formats();
  if (!formats.empty())  // not check(): its arguments are all evaluated, and begin() of an empty map is not one
    throw Error(a.model + ": its weights are quantized (" + to_string(formats.begin()->second) +
                "): merging adds scale * B A to the float32 weights, and storing the sum quantized again would round "
                "the adapter away; merge into the float32 model, then qkv quantize the result");
  if (model->has_lora()) model->remove_lora();  // the adapter given replaces the checkpoint's own
  load_adapter_dir(*model, a.adapter);
  const std::string options = to_string(model->lora_options());
  model->merge_lora();
  model->save_file(a.out, false, meta);
  std::printf("adapter     %s (%s)\nmerged      into %s\nwrote       %s\n", a.adapter.c_str(), options.c_str(),
              a.model.c_str(), a.out.c_str());
  return 0;
}

}  // namespace qkv::cli
