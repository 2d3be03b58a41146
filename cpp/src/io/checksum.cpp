// Tensor checksums (checksum.h).
#include "io/checksum.h"

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "qkv/error.h"

namespace qkv::io {
namespace {

// The byte-at-a-time table of the reflected polynomial 0xEDB88320, built at compile time.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

std::string hex8(uint32_t v) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

}  // namespace

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  uint32_t c = ~crc;
  for (uint8_t b : bytes) c = kTable[(c ^ b) & 0xffu] ^ (c >> 8);
  return ~c;
}

std::string checksum_metadata(const std::vector<TensorRef>& tensors) {
  nlohmann::ordered_json sums = nlohmann::ordered_json::object();
  for (const TensorRef& t : tensors) sums[t.name] = hex8(crc32(t.bytes));
  return sums.dump();
}

void verify_checksums(const SafetensorsFile& file) {
  const auto it = file.metadata.find(kChecksumKey);
  if (it == file.metadata.end()) return;
  nlohmann::json sums;
  try {
    sums = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::cat("checkpoint: the \"", kChecksumKey, "\" metadata is not valid JSON (", e.what(), ")"));
  }
  check(sums.is_object(), "checkpoint: the \"", kChecksumKey, "\" metadata is a JSON ", sums.type_name(),
        ", expected an object of tensor name -> CRC-32");
  check(sums.size() == file.tensors.size(), "checkpoint: the \"", kChecksumKey, "\" metadata lists ", sums.size(),
        " tensors but the file holds ", file.tensors.size(), " (the file was altered after it was saved)");
  for (const TensorEntry& t : file.tensors) {
    const auto sum = sums.find(t.name);
    check(sum != sums.end(), "checkpoint: tensor '", t.name, "' has no CRC-32 in the \"", kChecksumKey,
          "\" metadata (the file was altered after it was saved)");
    check(sum->is_string(), "checkpoint: the CRC-32 of tensor '", t.name, "' is a JSON ", sum->type_name(),
          ", expected a string of 8 hex digits");
    const std::string computed = hex8(crc32(t.bytes));
    check(sum->get<std::string>() == computed, "checkpoint: tensor '", t.name, "' is corrupt: its bytes have CRC-32 ",
          computed, " but the file recorded ", sum->get<std::string>(),
          " when it was saved (damaged on disk or in transfer; use another copy)");
  }
}

}  // namespace qkv::io
