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
#include <functional>
#include <map>
#include <optional>
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
// Converts whole elements of a float dtype (F32, F16, BF16, F64) to float32, as floats() does:
// out.size() * dtype_size(dtype) == bytes.size(). qkv::Error for other dtypes.
void to_floats(std::string_view dtype, std::span<const uint8_t> bytes, std::span<float> out);

// --- Streaming: the header first, then each tensor's bytes as they arrive, never the whole file in memory ---

// Where one tensor's bytes lie in the file: [begin, end) counted from the file's first byte.
struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};

// A file's header alone, with the same checks parse_safetensors makes (the tensors tile the buffer).
struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;  // in the order of their bytes
  uint64_t data_begin = 0;          // 8 + the JSON's length: where the first tensor's bytes start
  uint64_t file_size = 0;           // data_begin + every tensor's bytes: the whole file's size
};

// Where a SafetensorsReader hands each tensor's bytes, in file order.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  // The destination of tensor i's raw bytes, all of them (size() == the tensor's size), when they can be read
  // straight into place (a float32 parameter in host memory): no copy then. Empty: they come to take() from the
  // reader's staging buffer instead, in pieces of whole elements.
  virtual std::span<uint8_t> place(size_t /*i*/) { return {}; }
  // Bytes [offset, offset + bytes.size()) of tensor i, in order; in place, `bytes` lies inside place(i).
  virtual void take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) = 0;
  // Tensor i is complete (also called for a tensor of no bytes).
  virtual void end(size_t /*i*/) {}
};

// A safetensors file read front to back in pieces of any size: from a file descriptor, or chunks that JavaScript
// pushes in as a download arrives. The reader parses the header once its 8 + N bytes are in (header() then
// answers; set a sink before more bytes come), then passes each tensor's bytes to the sink as they arrive:
// straight into the destination where the sink offers one (write where buffer() points, then commit), else
// through a small staging buffer. Strict as parse_safetensors: qkv::Error for a malformed header, bytes past
// the file's end, and (finish) a file that ends early.
class SafetensorsReader {
 public:
  // file_size: the whole file's size when known (a file, an HTTP Content-Length): the header is checked against
  // it as parse_safetensors does. Unknown: finish() checks that the file ended where its header says.
  explicit SafetensorsReader(std::optional<uint64_t> file_size = std::nullopt);

  // Where the next bytes of the file go: write up to size() bytes there, then commit() how many. Empty once
  // the file is complete, and after the header until a sink is set.
  std::span<uint8_t> buffer();
  void commit(size_t n);
  // Copies `bytes` through buffer() and commit(); returns how many it took: all of them, or fewer when the
  // header completed while no sink is set (set one, then push the rest).
  size_t push(std::span<const uint8_t> bytes);

  bool has_header() const { return parsed_; }
  const SafetensorsHeader& header() const;
  void set_sink(TensorSink* sink);
  bool has_sink() const { return sink_ != nullptr; }
  uint64_t position() const { return position_; }  // bytes committed so far
  bool done() const { return parsed_ && tensor_ == header_.tensors.size(); }
  // qkv::Error unless the whole file has arrived ("the file ended after P of N bytes (truncated?)").
  void finish() const;

 private:
  void advance();  // past complete (and empty) tensors
  std::optional<uint64_t> file_size_;
  std::vector<uint8_t> head_;  // the header's bytes, until parsed
  SafetensorsHeader header_;
  bool parsed_ = false;
  TensorSink* sink_ = nullptr;
  uint64_t position_ = 0;
  size_t tensor_ = 0;             // the tensor the next bytes belong to
  uint64_t offset_ = 0;           // bytes of it committed
  std::span<uint8_t> in_place_;   // its place() span, when it has one
  bool placed_ = false;           // place() was asked for it
  std::vector<uint8_t> staging_;  // bytes of tensors without a place, in whole elements
  size_t carry_ = 0;              // bytes of a partial element at staging_'s start
};

// The header at the start of `head` (at least 8 + N bytes; more are ignored): what parse_safetensors checks
// of it, with file_size (when known) the whole file's size.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> head, std::optional<uint64_t> file_size);

// Reads the file at `path` front to back through a reader that knows its size: on_header is called once the
// header is parsed and sets the reader's sink (or none: the reading then stops after the header, unchecked
// beyond it). Errors start with the path, as read_safetensors's.
void read_safetensors_stream(const std::string& path, const std::function<void(SafetensorsReader&)>& on_header);

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
  // Raw little-endian bytes of any dtype (a quantized checkpoint's I8 / U8 / F16 / BF16 rows).
  TensorRef(std::string name, std::vector<int64_t> shape, std::string dtype, std::span<const uint8_t> data);

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
// The same for the file serialize_safetensors(tensors, metadata) would give, written tensor by tensor from the
// caller's memory: no copy of the whole file is made.
void write_safetensors_atomic(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace qkv
