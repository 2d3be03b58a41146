#pragma once
// A Hugging Face GPT-2's model.safetensors loaded as it arrives (a file read in chunks, a download, a stream in the
// browser), written tensor by tensor straight into a LanguageModel's parameters: F16 / BF16 / F64 converted and
// GPT-2's Conv1D weights transposed on the way, so that memory is the model's float32 weights and a 1 MiB staging
// buffer, never the file nor a converted copy of it (load_pretrained uses it; qkv/import.h). With
// PretrainedWeights::Keep, F16 / BF16 matrices are written as they are into the model's half-precision storage
// instead: memory is then the half-precision weights.
//
//   PretrainedLoader loader(config_json_text, file_size);   // or std::nullopt when the size is unknown
//   while (more) { auto to = loader.buffer(); size_t n = read_into(to); loader.commit(n); }
//   std::unique_ptr<LanguageModel> m = loader.finish();
//
// Sharded weights (model.safetensors.index.json and the model-0000N-of-0000M.safetensors files it names) stream the
// same way, the shards' files one after another, once the loader has every shard's header (its first bytes): the
// whole plan is then checked before any tensor's bytes, as for one file.
//
// The checks are import_pretrained's, with its messages: config.json first (a model_type qkv does not run is
// refused by the constructor), then, once the safetensors header has arrived and before any tensor's bytes are
// taken, every missing, mis-shaped and left-over tensor at once; what can only be judged by value (the attn.bias
// and attn.masked_bias buffers, a lm_head.weight that must equal wte.weight) as the bytes pass, reported by
// finish(). A file that ends early is refused by finish(). After an error the loader is spent: destroy it (with the
// partly written model).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/import.h"
#include "qkv/language_model.h"

namespace qkv {

// One shard of sharded weights: its file name as model.safetensors.index.json gives it, and its first bytes (at
// least 8 + its header's length; more are ignored).
struct PretrainedShard {
  std::string file;
  std::vector<uint8_t> head;
};

class PretrainedLoader {
 public:
  // config_json: config.json's text. total: model.safetensors' size when known (a file's, a Content-Length).
  // weights: PretrainedWeights::Keep keeps the file's F16 / BF16 matrices in that format (qkv/import.h); the model
  // is then built when the header has arrived (the formats come from it), not here.
  explicit PretrainedLoader(std::string_view config_json, std::optional<uint64_t> total = std::nullopt,
                            const OptimizerConfig& optimizer = {}, PretrainedWeights weights = PretrainedWeights::F32);
  // Sharded: `index_json` is model.safetensors.index.json's text, `shards` every shard it names (each once) in the
  // order their bytes will come; the bytes pushed are then those files one after another, each whole (from its
  // header on). Refused here, at once: a shard the index names that is not given (or one it does not name), a
  // tensor the index puts in a shard whose header lacks it, and every missing or mis-shaped tensor of the model.
  PretrainedLoader(std::string_view config_json, std::string_view index_json, std::vector<PretrainedShard> shards,
                   const OptimizerConfig& optimizer = {}, PretrainedWeights weights = PretrainedWeights::F32);
  ~PretrainedLoader();
  PretrainedLoader(const PretrainedLoader&) = delete;
  PretrainedLoader& operator=(const PretrainedLoader&) = delete;

  // Where the next bytes of the file go: write up to size() bytes there, then commit() how many. Empty once the
  // file is complete.
  std::span<uint8_t> buffer();
  void commit(size_t n);
  // Copies `bytes` through buffer() and commit(); qkv::Error for bytes past the file's end.
  void push(std::span<const uint8_t> bytes);
  uint64_t received() const;
  // The bytes of the file (sharded: of all the shards' files) when known.
  std::optional<uint64_t> total() const;
  // The model (on the CPU), once the whole file has arrived.
  std::unique_ptr<LanguageModel> finish();

  // The qkv config config.json maps to (JSON), and the notes of what was checked and ignored (complete after
  // finish): import_pretrained's ImportedWeights::config_json and ::notes.
  const std::string& config_json() const;
  const std::vector<std::string>& notes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace qkv
