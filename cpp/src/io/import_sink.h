#pragma once
// A foreign safetensors file (io/import.h's formats) written into a model's parameters as its bytes arrive
// (SafetensorsReader), never the whole file nor a mapped copy in memory: what load_pretrained, PretrainedLoader and
// import_model stream through.
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "io/import.h"
#include "ops/weight_format.h"
#include "qkv/safetensors.h"

namespace qkv::io {

// The header's tensors without their bytes: what plan_weights and import_config read.
SafetensorsFile skeleton(const SafetensorsHeader& header);

// The plan of a file's header onto `targets` (plan_weights on its names, dtypes and shapes), refused with every
// problem at once (qkv::Error, import's message) when it does not fit; a tied head of another shape than its
// embedding is one (it cannot be compared value by value).
WeightPlan plan_header(const SafetensorsHeader& header, const std::string& format, const std::string& kind,
                       const std::vector<Target>& targets, int heads);

// Whether `plan` can stream: every operation but seed 004's expansion (which needs its three sources at once), and
// no tensor of the file feeding two parameters.
bool can_stream(const WeightPlan& plan);

// A parameter stored packed (ops/weight_format.h) that a file's tensors are written into as they are: a half-precision
// matrix kept in the file's format (PretrainedWeights::Keep). `rows` is its storage, rows x row_stride(format, cols).
struct PackedTarget {
  ops::WeightFormat format = ops::WeightFormat::F16;
  std::span<uint8_t> rows;
  int64_t n = 0, cols = 0;  // the parameter's shape (out, in)
};

// Where each of the file's tensors goes, in the parameters' float32 host memory (`values`, by qkv name): F32 copies
// read straight into place; F16 / BF16 / F64 converted from the reader's staging; Conv1D weights, stored (in, out),
// transposed into qkv's (out, in); W_q | W_k | W_v each into its third; the tensors checked by value (buffers)
// collected one at a time and checked when complete (check_values); a tied head either written into the embedding
// (when it comes first) or compared with what the embedding wrote there. The parameters in `packed` (by qkv name;
// their float32 spans empty) take their tensor's 16-bit elements as they are, copied (or transposed) into their rows:
// the file's dtype must be their format (kept_formats chooses them so).
class ImportSink : public TensorSink {
 public:
  using Packed = std::map<std::string, PackedTarget>;
  // One file: its tensors' bytes come in the header's order.
  ImportSink(WeightPlan plan, const SafetensorsHeader& header, const std::map<std::string, std::span<float>>& values,
             const Packed& packed = {});
  // Several files (a model's shards): `order` names the tensors in the order their bytes will come, file after file;
  // bind() each file's header before its bytes. A tensor no file's header has, or that `order` leaves out, is skipped.
  ImportSink(WeightPlan plan, const std::vector<std::string>& order,
             const std::map<std::string, std::span<float>>& values, const Packed& packed = {});
  // `only` (when given): the header's tensors that this file gives (a shard's, as the index says); the others skip.
  void bind(const SafetensorsHeader& header, const std::set<std::string>* only = nullptr);
  std::span<uint8_t> place(size_t i) override;
  void take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) override;
  void end(size_t i) override;
  // After the last tensor (the header may be gone by then): qkv::Error for what the values showed (a buffer that is not
  // what qkv computes, an untied head), all at once; else the notes of what was checked and ignored.
  std::vector<std::string> finish();

 private:
  enum class Act { Skip, Write, Transpose, Compare, Collect };
  struct Action {
    Act act = Act::Skip;
    float* dst = nullptr;        // Write, Compare: where the tensor's first value goes (or is compared);
                                 // Transpose: the parameter (cols, rows)
    int64_t rows = 0, cols = 0;  // Transpose: the stored shape (in, out); packed Write, Compare: the parameter's
    // A packed parameter (dst null): its rows, `stride` bytes apart, in `format`.
    uint8_t* packed = nullptr;
    size_t stride = 0;
    ops::WeightFormat format = ops::WeightFormat::F32;
  };
  // Elements [first, first + n) of the tensor, as floats (floats_) or 16-bit codes (bytes), into a packed parameter.
  void take_packed(const Action& a, const TensorInfo& t, size_t first, size_t n, std::span<const uint8_t> bytes);
  const SafetensorsHeader* header_ = nullptr;  // the file bind() gave
  WeightPlan plan_;
  std::map<std::string, Action> by_name_;  // what becomes of each of the files' tensors
  std::vector<Action> actions_;            // per tensor of the bound header
  std::vector<TensorEntry> collected_;     // per tensor: the bytes of a tensor checked by value, until it completes
  std::vector<float> floats_;              // conversion staging
  bool head_differs_ = false;
};

}  // namespace qkv::io
