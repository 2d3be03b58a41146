#pragma once
// Hugging Face GPT-2 folders, the parts shared by import_pretrained (io/pretrained.cpp) and the streaming
// PretrainedLoader (io/pretrained_loader.cpp): config.json read as a qkv config, and the sink that writes a
// model.safetensors' tensors into a LanguageModel's parameters as they arrive.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/import.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"

namespace qkv::io {

// GPT-2's config.json as qkv's LanguageModel config (JSON); qkv::Error naming the field qkv cannot honour (or the
// model_type it does not run). `notes` gets what differs from the source (dropout left out).
std::string gpt2_config(std::string_view config_json, std::vector<std::string>& notes);

// Where each tensor of a GPT-2 model.safetensors goes, as its bytes arrive (SafetensorsReader), in the model's
// float32 parameters on the CPU: F32 copies read straight into place; F16 / BF16 / F64 converted from the reader's
// staging; Conv1D weights, stored (in, out), transposed into qkv's (out, in); the buffers collected one at a time
// and checked when complete (check_values); a lm_head.weight either written into tok_emb.weight (when it comes
// before wte.weight) or compared with what wte.weight wrote there. The constructor plans from the header alone
// (plan_weights) and refuses, every problem at once, before a byte is taken.
class Gpt2Sink : public TensorSink {
 public:
  Gpt2Sink(LanguageModel& model, const SafetensorsHeader& header);
  std::span<uint8_t> place(size_t i) override;
  void take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) override;
  void end(size_t i) override;
  // After the last tensor: qkv::Error for what the values showed (a buffer that is not GPT-2's, an untied head),
  // all at once; else the notes of what was checked and ignored.
  std::vector<std::string> finish();

 private:
  enum class Act { Skip, Write, Transpose, Compare, Collect };
  struct Action {
    Act act = Act::Skip;
    float* dst = nullptr;        // Write, Compare: where the tensor's first value goes (or is compared);
                                 // Transpose: the parameter (cols, rows)
    int64_t rows = 0, cols = 0;  // Transpose: the stored shape (in, out)
  };
  const SafetensorsHeader& header_;
  WeightPlan plan_;
  std::vector<Action> actions_;         // per tensor of the header
  std::vector<TensorEntry> collected_;  // per tensor: the bytes of a checked buffer, until it completes
  std::vector<float> floats_;           // conversion staging
  std::string head_, wte_;              // a tied head's names as the file has them, when it has one
  bool head_differs_ = false;
};

}  // namespace qkv::io
