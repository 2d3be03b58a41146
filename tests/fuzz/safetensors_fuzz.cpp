// Fuzzes the safetensors reader (header length, JSON header, dtypes, offsets, shapes) and the checkpoint
// checksums in its metadata. Contract: any bytes end in a parsed file or in qkv::Error; anything else
// (another exception, a sanitizer report, a crash) is a bug.
#include <cstdint>
#include <span>

#include "io/checksum.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qkv::SafetensorsFile file;
  try {
    file = qkv::parse_safetensors(std::span<const uint8_t>(data, size));
  } catch (const qkv::Error&) {
    return 0;
  }
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
