#pragma once
// Checksums of a checkpoint's tensors, so that a file damaged on disk or in transit (a flipped bit, a
// download cut short and padded) is refused with the tensor's name rather than loaded as wrong weights.
//
// The metadata key "qkv.crc32" holds a JSON object mapping every tensor's name to the CRC-32 (IEEE 802.3,
// the polynomial of zlib and PNG) of its raw bytes, as 8 lower-case hex digits. Per tensor rather than one
// sum of the whole file, so the error names what is damaged. Files without the key (older checkpoints,
// files written by PyTorch) are accepted unchecked.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/safetensors.h"

namespace qkv::io {

inline constexpr const char* kChecksumKey = "qkv.crc32";

// CRC-32 of `bytes`, continuing from `crc` (0 to start): crc32(b, crc32(a)) == crc32(a + b).
uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

// The value of the "qkv.crc32" metadata key for these tensors.
std::string checksum_metadata(const std::vector<TensorRef>& tensors);

// When `file` has a "qkv.crc32" key: qkv::Error unless it is well formed, lists exactly the file's tensors
// and every tensor's bytes match its CRC. A file without the key passes.
void verify_checksums(const SafetensorsFile& file);

// The parts of verify_checksums, for a file read in pieces (SafetensorsReader): the CRC each of `names` (the
// file's tensors) must have, as recorded, after the same checks of the key (empty strings when there is none);
// then, per tensor, qkv::Error naming it unless hex8(computed) equals what was recorded (or nothing was).
std::vector<std::string> expected_checksums(const std::map<std::string, std::string>& metadata,
                                            const std::vector<std::string>& names);
void check_checksum(const std::string& name, const std::string& expected, uint32_t computed);

}  // namespace qkv::io
