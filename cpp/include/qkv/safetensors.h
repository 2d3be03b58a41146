#pragma once
// The safetensors file format (https://github.com/huggingface/safetensors), the layer checkpoints are
// built on. A file is: an 8-byte little-endian uint64 N; N bytes of UTF-8 JSON
//   {"__metadata__": {"key": "string value", ...},
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// padded with spaces; then the byte buffer, in which each tensor is row-major little-endian at
// [begin, end) relative to the buffer's start.
//
// Reading is strict because the files come from users: every malformed or truncated input raises
// qkv::Error naming what is wrong and what was expected, never reads out of bounds, and rejects what the
// reference implementation rejects (tensors must tile the buffer exactly: no overlap, no gap, nothing
// after the last one). Any dtype of the reference is accepted; floats() and ints() convert the common ones.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qkv {

// One tensor as stored: its raw little-endian bytes and the safetensors dtype name ("F32", "BF16", "I64"...).
struct TensorEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;  // empty for a 0-d scalar
  std::vector<uint8_t> bytes;  // numel * dtype_size(dtype) bytes

  int64_t numel() const;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // the "__metadata__" object (string values only)
  std::vector<TensorEntry> tensors;             // in the order of their bytes in the file

  // The tensor called `name`; qkv::Error naming it and listing some of the tensors present otherwise.
  const TensorEntry& at(std::string_view name) const;
  bool contains(std::string_view name) const;
  // The values of tensor `name` as float32: F32 as is, F16 / BF16 / F64 converted (PyTorch users save
  // those; F64 beyond float's range becomes +-inf, as torch's .float() does). qkv::Error for other dtypes.
  std::vector<float> floats(std::string_view name) const;
  // The values of an integer or BOOL tensor (I8..I64, U8..U64; U64 above INT64_MAX is an error).
  std::vector<int64_t> ints(std::string_view name) const;
};

// Bytes per element of a safetensors dtype name; qkv::Error listing the known names for any other.
size_t dtype_size(std::string_view dtype);

// Parses a whole safetensors file held in memory (the browser hands us bytes, not paths).
SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes);
// Reads and parses the file at `path`; every error message starts with the path.
SafetensorsFile read_safetensors(const std::string& path);

// A tensor to write, borrowed from the caller: the span must outlive serialize_safetensors.
// float tensors are written as F32, int32 as I32 and int64 as I64 (token ids).
struct TensorRef {
  TensorRef(std::string name, std::vector<int64_t> shape, std::span<const float> data);
  TensorRef(std::string name, std::vector<int64_t> shape, std::span<const int32_t> data);
  TensorRef(std::string name, std::vector<int64_t> shape, std::span<const int64_t> data);

  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  std::span<const uint8_t> bytes;
  size_t count;  // elements in the span, checked against the shape when serialized
};

// A complete safetensors file: metadata (omitted when empty) and the tensors, wider dtypes first so every
// tensor is aligned to its element size in the file (as the reference writer does), otherwise in the order
// given. qkv::Error for duplicate or reserved names, negative dims, or data that does not match a shape.
std::vector<uint8_t> serialize_safetensors(const std::vector<TensorRef>& tensors,
                                           const std::map<std::string, std::string>& metadata);

// Writes `bytes` to `path` so that a failure at any point (disk full, crash, kill) leaves whatever was at
// `path` before untouched: the bytes go to a fresh temporary file beside it, which is flushed to disk
// (fsync) and then renamed over `path`. On failure the temporary file is removed and qkv::Error names the
// path and the operating system's reason.
void write_safetensors_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace qkv
