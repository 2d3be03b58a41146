// Fuzzes the safetensors reader (header length, JSON header, dtypes, offsets, shapes) and the checkpoint
// checksums in its metadata. Contract: any bytes end in a parsed file or in qkv::Error; anything else
// (another exception, a sanitizer report, a crash) is a bug. The streaming reader gets the same bytes in
// pieces (their size from the first byte), its size unknown: a file parse_safetensors accepts it must accept
// too, handing over the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "io/checksum.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace {

class Collect : public qkv::TensorSink {
 public:
  explicit Collect(const qkv::SafetensorsHeader& h) {
    for (const auto& t : h.tensors) got.emplace_back(static_cast<size_t>(t.size()));
  }
  void take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) override {
    std::memcpy(got[i].data() + offset, bytes.data(), bytes.size());
  }
  std::vector<std::vector<uint8_t>> got;
};

// The tensors' bytes as the streaming reader hands them over, or nothing when it refuses the input.
bool stream(std::span<const uint8_t> bytes, std::vector<std::vector<uint8_t>>& got) {
  const size_t piece = bytes.empty() ? 1 : 1 + bytes[0] % 61;
  try {
    qkv::SafetensorsReader reader;
    std::vector<std::unique_ptr<Collect>> sink;
    for (size_t at = 0; at < bytes.size();) {
      at += reader.push(bytes.subspan(at, std::min(piece, bytes.size() - at)));
      if (reader.has_header() && sink.empty()) {
        sink.push_back(std::make_unique<Collect>(reader.header()));
        reader.set_sink(sink.back().get());
      }
    }
    reader.finish();
    if (!sink.empty()) got = std::move(sink.back()->got);
    return true;
  } catch (const qkv::Error&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::vector<uint8_t>> streamed;
  const bool stream_ok = stream(std::span<const uint8_t>(data, size), streamed);
  qkv::SafetensorsFile file;
  try {
    file = qkv::parse_safetensors(std::span<const uint8_t>(data, size));
  } catch (const qkv::Error&) {
    return 0;
  }
  if (!stream_ok || streamed.size() != file.tensors.size()) std::abort();  // the reader refused a valid file
  for (size_t i = 0; i < streamed.size(); ++i)
    if (streamed[i] != file.tensors[i].bytes) std::abort();
  // A parsed file: every accessor a loader uses must also end cleanly, whatever the dtypes and shapes.
  for (const qkv::TensorEntry& t : file.tensors) {
    try {
      (void)file.floats(t.name);
    } catch (const qkv::Error&) {
    }
    try {
      (void)file.ints(t.name);
    } catch (const qkv::Error&) {
    }
  }
  try {
    qkv::io::verify_checksums(file);
  } catch (const qkv::Error&) {
  }
  return 0;
}
