#pragma once
// A checkpoint that arrives in pieces (a download, a file read in chunks, a stream in the browser), loaded as it
// comes: the safetensors header first, from which the model is built (config and optimizer from its metadata),
// then each tensor straight into the model's parameters, converted (F16, BF16, F64) on the way. Nothing holds
// the whole file: memory is the model's weights and a 1 MiB staging buffer. A foreign state dict (no
// "qkv.model" metadata; io/import.h) is mapped as a whole, so its bytes are kept until finish().
//
//   CheckpointLoader<LanguageModel> loader(total_bytes);   // or std::nullopt when the size is unknown
//   while (more) { auto to = loader.buffer(); size_t n = read_into(to); loader.commit(n); }
//   std::unique_ptr<LanguageModel> m = loader.finish();
//
// Every malformed, truncated or mismatched file raises qkv::Error as load() does, from the commit() that meets
// it or from finish() (a file that ended early). After an error the loader is spent: destroy it.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

namespace qkv {

template <class M>  // LanguageModel, Seq2Seq or Classifier
class CheckpointLoader {
 public:
  // total: the file's size when known (a File's size, an HTTP Content-Length): checked against the header.
  explicit CheckpointLoader(std::optional<uint64_t> total = std::nullopt);
  ~CheckpointLoader();
  CheckpointLoader(const CheckpointLoader&) = delete;
  CheckpointLoader& operator=(const CheckpointLoader&) = delete;

  // Where the next bytes of the file go: write up to size() bytes there, then commit() how many. Empty once the
  // file is complete.
  std::span<uint8_t> buffer();
  void commit(size_t n);
  // Copies `bytes` through buffer() and commit(); qkv::Error for bytes past the file's end.
  void push(std::span<const uint8_t> bytes);
  uint64_t received() const;
  // The file's size: as given, or as its header says once it has arrived; nothing before either.
  std::optional<uint64_t> total() const;
  // The model, once the whole file has arrived; qkv::Error for a file that ended early.
  std::unique_ptr<M> finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace qkv
