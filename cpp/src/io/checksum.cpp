// Tensor checksums (checksum.h).
#include "io/checksum.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "qkv/error.h"

namespace qkv::io {
namespace {

// Slicing-by-8 tables of the reflected polynomial 0xEDB88320, built at compile time: t[0] is the classic
// byte-at-a-time table, t[k][b] the CRC of byte b followed by k zero bytes, so that eight bytes fold into the
// running CRC with eight independent lookups (about 1 byte per cycle instead of 1 per 4 to 5).
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
  return t;
}
constexpr Tables kTables = make_tables();

std::string hex8(uint32_t v) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

}  // namespace

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  uint32_t c = ~crc;
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  const auto& t = kTables;
  // Little-endian words (every target is: safetensors.cpp asserts it); memcpy for unaligned input.
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^ t[3][hi & 0xffu] ^
        t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ *p) & 0xffu] ^ (c >> 8);
  return ~c;
}

std::string checksum_metadata(const std::vector<TensorRef>& tensors) {
  nlohmann::ordered_json sums = nlohmann::ordered_json::object();
  for (const TensorRef& t : tensors) sums[t.name] = hex8(crc32(t.bytes));
  return sums.dump();
}

std::vector<std::string> expected_checksums(const std::map<std::string, std::string>& metadata,
                                            const std::vector<std::string>& names) {
  const auto it = metadata.find(kChecksumKey);
  if (it == metadata.end()) return std::vector<std::string>(names.size());
  nlohmann::json sums;
  try {
    sums = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::cat("checkpoint: the \"", kChecksumKey, "\" metadata is not valid JSON (", e.what(), ")"));
  }
  check(sums.is_object(), "checkpoint: the \"", kChecksumKey, "\" metadata is a JSON ", sums.type_name(),
        ", expected an object of tensor name -> CRC-32");
  check(sums.size() == names.size(), "checkpoint: the \"", kChecksumKey, "\" metadata lists ", sums.size(),
        " tensors but the file holds ", names.size(), " (the file was altered after it was saved)");
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const std::string& name : names) {
    const auto sum = sums.find(name);
    check(sum != sums.end(), "checkpoint: tensor '", name, "' has no CRC-32 in the \"", kChecksumKey,
          "\" metadata (the file was altered after it was saved)");
    check(sum->is_string(), "checkpoint: the CRC-32 of tensor '", name, "' is a JSON ", sum->type_name(),
          ", expected a string of 8 hex digits");
    out.push_back(sum->get<std::string>());
  }
  return out;
}

void check_checksum(const std::string& name, const std::string& expected, uint32_t computed) {
  if (expected.empty()) return;
  const std::string text = hex8(computed);
  check(expected == text, "checkpoint: tensor '", name, "' is corrupt: its bytes have CRC-32 ", text,
        " but the file recorded ", expected, " when it was saved (damaged on disk or in transfer; use another copy)");
}

void verify_checksums(const SafetensorsFile& file) {
  if (!file.metadata.count(kChecksumKey)) return;
  std::vector<std::string> names;
  for (const TensorEntry& t : file.tensors) names.push_back(t.name);
  const std::vector<std::string> sums = expected_checksums(file.metadata, names);
  for (size_t i = 0; i < names.size(); ++i) check_checksum(names[i], sums[i], crc32(file.tensors[i].bytes));
}

}  // namespace qkv::io
