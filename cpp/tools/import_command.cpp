// The qkv tool's `import` command (commands.h): a foreign checkpoint file (PyTorch state dict, safetensors; the
// formats of qkv/import.h) or a Hugging Face model folder, written as a qkv checkpoint with its tokenizer.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "io/checkpoint.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/model.h"
#include "qkv/safetensors.h"
#include "qkv/tokenizer.h"
#include "task.h"

namespace qkv::cli {
namespace {

// The metadata in a safetensors file's header, read alone.
std::map<std::string, std::string> file_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open for reading");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  check(in.good() && n < (uint64_t{1} << 31), path, ": not a safetensors file");
  std::vector<uint8_t> head(8 + n);
  std::memcpy(head.data(), &n, 8);
  in.read(reinterpret_cast<char*>(head.data() + 8), static_cast<std::streamsize>(n));
  check(in.good(), path, ": the header is cut short");
  return io::with_path(path, [&] { return parse_safetensors_header(head, std::filesystem::file_size(path)).metadata; });
}

}  // namespace

int run_import(const ImportArgs& a) {
  check_output(a.out, "OUT", {a.in, a.tokenizer});
  const bool folder = std::filesystem::is_directory(a.in);
  if (folder && ((a.from != "auto" && a.from != "gpt2") || a.heads || a.context || !a.activation.empty() ||
                 !a.norm.empty() || a.scale_embedding.given))
    throw UsageError(a.in +
                     " is a model folder, whose config.json gives the architecture: --from, --heads, "
                     "--context, --activation, --norm and --scale-embedding do not apply");
  if (!folder && !a.weights.empty())
    throw UsageError("--weights applies to a model folder (config.json + model.safetensors); " + a.in +
                     " is a file: its tensors are converted to float32 (qkv quantize packs them afterwards)");
  const PretrainedWeights weights =
      a.weights.empty() ? PretrainedWeights::F32 : pretrained_weights_from_string(a.weights, "--weights");
  ImportOptions o;
  o.from = a.from;
  o.heads = a.heads;
  o.context = a.context;
  o.activation = a.activation;
  o.norm = a.norm;
  o.pad_id = a.pad_id;
  if (a.scale_embedding.given) o.scale_embedding = a.scale_embedding.value ? 1 : 0;
  // The file (or a folder's model.safetensors) streams into the model (import_model, load_pretrained: memory is the
  // weights, never the file nor a mapped copy); `r` reports what import_file / import_pretrained would.
  ImportedWeights r;
  const std::unique_ptr<Model> model =
      folder ? std::unique_ptr<Model>(load_pretrained(a.in, {}, Device::CPU, &r, weights)) : import_model(a.in, o, &r);
  // A qkv checkpoint keeps what it carried (its tokenizers, labels, training settings); a foreign file has none.
  std::map<std::string, std::string> meta =
      r.format == "qkv" ? carried_metadata(file_metadata(a.in)) : std::map<std::string, std::string>{};
  if (!meta.count("qkv.imported_from")) meta["qkv.imported_from"] = r.format;
  if (!a.tokenizer.empty()) {
    const Tokenizer tok = Tokenizer::from_json(read_text(a.tokenizer));
    const auto config = nlohmann::json::parse(r.config_json);
    const int vocab =
        config.contains("vocab_size") ? config.at("vocab_size").get<int>() : config.at("src_vocab").get<int>();
    check(tok.size() == vocab, a.tokenizer, ": the tokenizer has ", tok.size(), " tokens, the model's vocabulary ",
          vocab);
    meta["qkv.tokenizer"] = tok.to_json();
  } else if (folder) {
    // The folder's own BPE tokenizer goes into the checkpoint, so `qkv generate --ckpt OUT --prompt TEXT` works.
    const std::optional<Tokenizer> tok = folder_tokenizer(a.in, r.tokenizer_files);
    const int vocab = nlohmann::json::parse(r.config_json).at("vocab_size").get<int>();
    if (tok) {
      check(tok->size() <= vocab, a.in, ": the tokenizer has ", tok->size(),
            " tokens, more than the model's vocabulary of ", vocab);
      meta["qkv.tokenizer"] = tok->to_json();
    }
  }
  model->save_file(a.out, false, meta);  // tensor by tensor from the model's memory
  std::printf("format      %s\nmodel       %s\nconfig      %s\n", r.format.c_str(), r.kind.c_str(),
              r.config_json.c_str());
  for (const auto& note : r.notes) std::printf("note        %s\n", note.c_str());
  if (const auto formats = model->weight_formats(); !formats.empty())
    std::printf("weights     %zu matrices kept in %s (inference only: qkv generate, eval)\n", formats.size(),
                to_string(formats.begin()->second));
  std::printf("wrote       %s\n", a.out.c_str());
  return 0;
}

}  // namespace qkv::cli
