// The safetensors reader and writer. The reader is written for hostile input (it is fuzzed): every size
// read from the file is checked against the bytes actually present before it is used, and every product
// of sizes is checked for overflow, so a malformed file can only end in qkv::Error.
#include "qkv/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "io/atomic_write.h"
#include "ops/weight_format.h"
#include "qkv/error.h"

// The format stores little-endian bytes and the tensors are copied as is; every target (x86-64, wasm32,
// aarch64) is little-endian. A big-endian port would need byte swaps in parse and serialize.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace qkv {
namespace {

using json = nlohmann::json;

// The reference implementation's limit: a header this large is a foreign file, not a checkpoint.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DtypeInfo {
  std::string_view name;
  size_t size;
};
// The reference's dtypes with a whole number of bytes per element.
constexpr std::array<DtypeInfo, 15> kDtypes{{{"BOOL", 1},
                                             {"U8", 1},
                                             {"I8", 1},
                                             {"F8_E5M2", 1},
                                             {"F8_E4M3", 1},
                                             {"I16", 2},
                                             {"U16", 2},
                                             {"F16", 2},
                                             {"BF16", 2},
                                             {"I32", 4},
                                             {"U32", 4},
                                             {"F32", 4},
                                             {"F64", 8},
                                             {"I64", 8},
                                             {"U64", 8}}};

std::string known_dtypes() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

const DtypeInfo* find_dtype(std::string_view name) {
  for (const auto& d : kDtypes)
    if (d.name == name) return &d;
  return nullptr;
}

// Product of dims, or nothing when it overflows uint64. A zero dim makes the tensor empty whatever the
// others are, so it is checked first (a [2^40, 2^40, 0] tensor is valid and holds no bytes).
std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t n = 1;
  for (int64_t d : shape) {
    const auto u = static_cast<uint64_t>(d);
    if (n > std::numeric_limits<uint64_t>::max() / u) return std::nullopt;
    n *= u;
  }
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A non-negative JSON integer; `what` names the field for the message.
uint64_t json_uint(const json& v, const std::string& what) {
  check(v.is_number_integer(), what, " is a JSON ", v.type_name(), " (", v.dump(),
        "), expected a non-negative integer");
  check(v.is_number_unsigned(), what, " is negative (", v.dump(), "), expected a non-negative integer");
  return v.get<uint64_t>();
}

// Records duplicate keys, which nlohmann would otherwise silently resolve to the last one: a file whose
// meaning depends on which duplicate a reader keeps is rejected. One set of keys per open object.
struct DuplicateKeyFinder {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (duplicate.empty() && !open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second)
          duplicate = parsed.get<std::string>();
        break;
      default: break;
    }
    return true;
  }
};

struct Located {
  TensorInfo info;  // begin/end relative to the data buffer until the header is complete
};

Located parse_entry(const std::string& name, const json& v, uint64_t buffer_size) {
  const std::string where = "tensor '" + name + "'";
  check(v.is_object(), where, ": entry is a JSON ", v.type_name(),
        ", expected an object with \"dtype\", \"shape\" and \"data_offsets\"");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    check(v.contains(field), where, ": missing \"", field, "\" (expected \"dtype\", \"shape\" and \"data_offsets\")");

  Located out;
  TensorInfo& e = out.info;
  e.name = name;
  const json& dtype = v["dtype"];
  check(dtype.is_string(), where, ": \"dtype\" is a JSON ", dtype.type_name(), ", expected a string such as \"F32\"");
  e.dtype = dtype.get<std::string>();
  const DtypeInfo* info = find_dtype(e.dtype);
  check(info != nullptr, where, ": unknown dtype \"", e.dtype, "\", expected one of ", known_dtypes());

  const json& shape = v["shape"];
  check(shape.is_array(), where, ": \"shape\" is a JSON ", shape.type_name(), ", expected an array of dims");
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = json_uint(shape[i], where + ": dim " + std::to_string(i) + " of \"shape\"");
    check(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": dim ", i, " of \"shape\" is ", d,
          ", larger than the largest int64");
    e.shape.push_back(static_cast<int64_t>(d));
  }

  const json& offsets = v["data_offsets"];
  check(offsets.is_array() && offsets.size() == 2, where, ": \"data_offsets\" is ", offsets.dump(),
        ", expected [begin, end]");
  e.begin = json_uint(offsets[0], where + ": begin of \"data_offsets\"");
  e.end = json_uint(offsets[1], where + ": end of \"data_offsets\"");
  check(e.begin <= e.end, where, ": data_offsets [", e.begin, ", ", e.end, "] end before begin");
  check(e.end <= buffer_size, where, ": data_offsets [", e.begin, ", ", e.end, "] run past the ", buffer_size,
        "-byte data buffer (truncated file?)");

  const auto numel = checked_numel(e.shape);
  const uint64_t want = e.end - e.begin;
  check(numel && *numel <= want / info->size && *numel * info->size == want, where, ": shape ", shape_string(e.shape),
        " of ", e.dtype, " needs ",
        numel && *numel <= std::numeric_limits<uint64_t>::max() / info->size ? std::to_string(*numel * info->size)
                                                                             : std::string("more than 2^64"),
        " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", want);
  return out;
}

// The header length in the first 8 bytes, checked against the limit and (when known) the file's size.
uint64_t header_length(std::span<const uint8_t> first8, std::optional<uint64_t> file_size) {
  uint64_t header_size = 0;
  std::memcpy(&header_size, first8.data(), 8);
  check(header_size <= kMaxHeaderBytes, "header length ", header_size, " is over the ", kMaxHeaderBytes,
        "-byte limit (not a safetensors file?)");
  if (file_size) {
    const uint64_t after_length = *file_size - 8;
    check(header_size <= after_length, "header length ", header_size, " runs past the end of the file (", after_length,
          " bytes follow the length; truncated?)");
  }
  return header_size;
}

// The header, without the "safetensors: " prefix of the public functions' messages. `head` holds at least its
// 8 + N bytes; file_size, when known, is at least 8.
SafetensorsHeader parse_header(std::span<const uint8_t> head, std::optional<uint64_t> file_size) {
  const uint64_t header_size = header_length(head, file_size);
  check(head.size() - 8 >= header_size, "header length ", header_size, " runs past the ", head.size() - 8,
        " bytes given (truncated?)");
  check(header_size >= 2 && head[8] == '{', "the header does not start with '{' (header length ", header_size,
        "; not a safetensors file?)");

  const auto* header_begin = reinterpret_cast<const char*>(head.data() + 8);
  const std::string_view header_text(header_begin, static_cast<size_t>(header_size));
  DuplicateKeyFinder duplicates;
  json header;
  try {
    header = json::parse(header_text, std::ref(duplicates));
  } catch (const json::exception& e) {
    throw Error(detail::cat("the header is not valid JSON (", e.what(), ")"));
  }
  check(header.is_object(), "the header is a JSON ", header.type_name(), ", expected an object");
  check(duplicates.duplicate.empty(), "the header has the key \"", duplicates.duplicate,
        "\" twice, expected each tensor name and field once");

  // Unknown size (a stream without a length): every extent passes here, and the reader checks the end.
  const uint64_t buffer_size = file_size ? *file_size - 8 - header_size : std::numeric_limits<uint64_t>::max();
  SafetensorsHeader out;
  out.data_begin = 8 + header_size;
  std::vector<Located> located;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      // The reference reads it as Option<HashMap<String, String>>, so null is the same as absent.
      if (value.is_null()) continue;
      check(value.is_object(), "\"__metadata__\" is a JSON ", value.type_name(),
            ", expected an object of string values");
      for (const auto& [mkey, mvalue] : value.items()) {
        check(mvalue.is_string(), "metadata value for \"", mkey, "\" is a JSON ", mvalue.type_name(), " (",
              mvalue.dump(), "), expected a string");
        out.metadata.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    located.push_back(parse_entry(key, value, buffer_size));
  }

  // The tensors must tile the buffer exactly, as the reference requires: an overlap means two tensors alias
  // the same bytes, a gap or trailing bytes mean the file is not what its header says.
  std::sort(located.begin(), located.end(), [](const Located& a, const Located& b) {
    return std::tie(a.info.begin, a.info.end, a.info.name) < std::tie(b.info.begin, b.info.end, b.info.name);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const Located& t : located) {
    check(t.info.begin >= covered, "tensor '", t.info.name, "' at data_offsets [", t.info.begin, ", ", t.info.end,
          "] overlaps tensor '", previous ? *previous : "", "' which ends at ", covered);
    check(t.info.begin == covered, "tensor '", t.info.name, "' starts at ", t.info.begin,
          " but the previous tensor ends at ", covered, ", expected tensors to follow each other without gaps");
    covered = t.info.end;
    if (t.info.end > t.info.begin) previous = &t.info.name;
  }
  if (file_size)
    check(covered == buffer_size, "the tensors end at byte ", covered, " of the data buffer but it holds ", buffer_size,
          " bytes, expected no bytes after the last tensor");
  out.file_size = out.data_begin + covered;
  out.tensors.reserve(located.size());
  for (Located& t : located) {
    t.info.begin += out.data_begin;
    t.info.end += out.data_begin;
    out.tensors.push_back(std::move(t.info));
  }
  return out;
}

SafetensorsFile parse(std::span<const uint8_t> bytes) {
  check(bytes.size() >= 8, "the file is ", bytes.size(),
        " bytes, shorter than the 8-byte header length every safetensors file starts with (truncated?)");
  SafetensorsHeader header = parse_header(bytes, bytes.size());
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(header.tensors.size());
  for (TensorInfo& t : header.tensors) {
    const auto data = bytes.subspan(static_cast<size_t>(t.begin), static_cast<size_t>(t.size()));
    file.tensors.push_back({std::move(t.name), std::move(t.dtype), std::move(t.shape), {data.begin(), data.end()}});
  }
  return file;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string os_error(int err) { return std::strerror(err); }

// torch.save writes a zip archive ("PK\3\4") or, before PyTorch 1.6, a bare pickle (PROTO 2..5). Loading
// either means running the pickle's code, which qkv does not do; the user needs the one line that
// converts it. A safetensors file has '{' at byte 8, which neither has there. `first`: the file's first 9
// bytes (or all of a shorter one).
void check_not_pickle(std::span<const uint8_t> first) {
  const bool zip = first.size() >= 4 && first[0] == 'P' && first[1] == 'K' && first[2] == 3 && first[3] == 4;
  const bool pickle = first.size() >= 2 && first[0] == 0x80 && first[1] >= 2 && first[1] <= 5;
  check(!(zip || pickle) || (first.size() > 8 && first[8] == '{'),
        "the file is a PyTorch pickle (torch.save: .pt, .pth, .bin), which qkv does not execute; save the weights "
        "as safetensors instead: safetensors.torch.save_file(model.state_dict(), \"model.safetensors\")");
}

}  // namespace

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t dtype_size(std::string_view dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  check(info != nullptr, "unknown safetensors dtype \"", dtype, "\", expected one of ", known_dtypes());
  return info->size;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const TensorEntry& t) { return t.name == name; });
}

const TensorEntry& SafetensorsFile::at(std::string_view name) const {
  for (const TensorEntry& t : tensors)
    if (t.name == name) return t;
  std::string present;
  constexpr size_t kListed = 8;
  for (size_t i = 0; i < tensors.size() && i < kListed; ++i) present += (i ? ", '" : "'") + tensors[i].name + "'";
  if (tensors.size() > kListed) present += ", ...";
  throw Error(detail::cat("no tensor named '", name, "' in the safetensors file; it has ", tensors.size(), " tensors",
                          tensors.empty() ? "" : ": ", present));
}

void to_floats(std::string_view d, std::span<const uint8_t> bytes, std::span<float> out) {
  check(d == "F32" || d == "F16" || d == "BF16" || d == "F64", "dtype ", d,
        " is not a float dtype (F32, F16, BF16 or F64)");
  check(bytes.size() == out.size() * dtype_size(d), "to_floats: ", bytes.size(), " bytes of ", d, " for ", out.size(),
        " floats");
  const uint8_t* p = bytes.data();
  if (d == "F32") {
    if (!out.empty()) std::memcpy(out.data(), p, bytes.size());
  } else if (d == "F16") {
    for (size_t i = 0; i < out.size(); ++i) out[i] = ops::f16_to_f32(load<uint16_t>(p + 2 * i));
  } else if (d == "BF16") {  // the top half of a float32
    for (size_t i = 0; i < out.size(); ++i) out[i] = ops::bf16_to_f32(load<uint16_t>(p + 2 * i));
  } else {  // F64, rounded as IEEE does: beyond float's range gives +-inf, as torch's .float() does
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
  }
}

std::vector<float> SafetensorsFile::floats(std::string_view name) const {
  const TensorEntry& t = at(name);
  const std::string& d = t.dtype;
  check(d == "F32" || d == "F16" || d == "BF16" || d == "F64", "tensor '", name, "' has dtype ", d,
        ", expected a float dtype (F32, F16, BF16 or F64)");
  std::vector<float> out(t.bytes.size() / dtype_size(d));
  to_floats(d, t.bytes, out);
  return out;
}

namespace {
template <class T>
void widen(std::vector<int64_t>& out, const uint8_t* p) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(load<T>(p + sizeof(T) * i));
}
}  // namespace

std::vector<int64_t> SafetensorsFile::ints(std::string_view name) const {
  const TensorEntry& t = at(name);
  const uint8_t* p = t.bytes.data();
  const std::string& d = t.dtype;
  std::vector<int64_t> out(t.bytes.size() / dtype_size(d));
  if (d == "BOOL") {
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i] != 0;
  } else if (d == "U8") {
    widen<uint8_t>(out, p);
  } else if (d == "I8") {
    widen<int8_t>(out, p);
  } else if (d == "I16") {
    widen<int16_t>(out, p);
  } else if (d == "U16") {
    widen<uint16_t>(out, p);
  } else if (d == "I32") {
    widen<int32_t>(out, p);
  } else if (d == "U32") {
    widen<uint32_t>(out, p);
  } else if (d == "I64") {
    widen<int64_t>(out, p);
  } else if (d == "U64") {
    for (size_t i = 0; i < out.size(); ++i) {
      const auto u = load<uint64_t>(p + 8 * i);
      check(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "tensor '", name, "' element ", i, " is ",
            u, ", larger than the largest int64");
      out[i] = static_cast<int64_t>(u);
    }
  } else {
    throw Error(
        detail::cat("tensor '", name, "' has dtype ", d, ", expected an integer dtype (I8..I64, U8..U64 or BOOL)"));
  }
  return out;
}

SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes) {
  check_not_pickle(bytes);
  try {
    return parse(bytes);
  } catch (const Error& e) {
    throw Error(detail::cat("safetensors: ", e.what()));
  }
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> head, std::optional<uint64_t> file_size) {
  check_not_pickle(head);  // as parse_safetensors: said before the header length, which a pickle's bytes are not
  try {
    check(head.size() >= 8 && (!file_size || *file_size >= 8), "the file is ", file_size.value_or(head.size()),
          " bytes, shorter than the 8-byte header length every safetensors file starts with (truncated?)");
    return parse_header(head, file_size);
  } catch (const Error& e) {
    throw Error(detail::cat("safetensors: ", e.what()));
  }
}

namespace {
// Staging for tensors read without a place: big enough that a read() call or a JS chunk moves a lot at once,
// small next to any weight worth streaming.
constexpr size_t kStagingBytes = size_t{1} << 20;
}  // namespace

SafetensorsReader::SafetensorsReader(std::optional<uint64_t> file_size) : file_size_(file_size), head_(8) {}

const SafetensorsHeader& SafetensorsReader::header() const {
  check(parsed_, "SafetensorsReader::header(): the header has not arrived yet (", position_, " bytes in)");
  return header_;
}

void SafetensorsReader::set_sink(TensorSink* sink) {
  check(parsed_, "SafetensorsReader::set_sink: the header has not arrived yet");
  sink_ = sink;
  advance();
}

void SafetensorsReader::advance() {
  if (!sink_) return;
  while (tensor_ < header_.tensors.size()) {
    const TensorInfo& t = header_.tensors[tensor_];
    if (!placed_) {
      in_place_ = sink_->place(tensor_);
      check(in_place_.empty() || in_place_.size() == t.size(), "SafetensorsReader: the place of tensor '", t.name,
            "' holds ", in_place_.size(), " bytes, expected ", t.size());
      placed_ = true;
    }
    if (offset_ < t.size()) return;
    sink_->end(tensor_);
    ++tensor_;
    offset_ = 0;
    placed_ = false;
    in_place_ = {};
    carry_ = 0;
  }
}

std::span<uint8_t> SafetensorsReader::buffer() {
  if (!parsed_) return std::span<uint8_t>(head_).subspan(static_cast<size_t>(position_));
  if (!sink_ || done()) return {};
  const uint64_t left = header_.tensors[tensor_].size() - offset_;
  if (!in_place_.empty()) return in_place_.subspan(static_cast<size_t>(offset_), static_cast<size_t>(left));
  if (staging_.empty()) staging_.resize(kStagingBytes);
  const size_t room = std::min<uint64_t>(staging_.size() - carry_, left - carry_);
  return std::span<uint8_t>(staging_).subspan(carry_, room);
}

void SafetensorsReader::commit(size_t n) {
  if (n == 0) return;
  try {
    if (!parsed_) {
      check(n <= head_.size() - position_, "commit(", n, ") past the buffer given");
      position_ += n;
      if (position_ == 8 && head_.size() == 8) {
        check(!file_size_ || *file_size_ >= 8, "the file is ", file_size_.value_or(0),
              " bytes, shorter than the 8-byte header length every safetensors file starts with (truncated?)");
        head_.resize(static_cast<size_t>(8 + header_length(head_, file_size_)));
      }
      if (position_ == head_.size()) {  // the whole header (or a length of 0: refused by the parse)
        header_ = parse_header(head_, file_size_);
        parsed_ = true;
        head_ = {};
      }
      return;
    }
    check(sink_ != nullptr, "SafetensorsReader: bytes came before a sink was set");
    check(!done(), "the tensors end at byte ", header_.file_size - header_.data_begin,
          " of the data buffer but more bytes follow, expected no bytes after the last tensor");
    const TensorInfo& t = header_.tensors[tensor_];
    const uint64_t left = t.size() - offset_;
    if (!in_place_.empty()) {
      check(n <= left, "commit(", n, ") past the buffer given");
      sink_->take(tensor_, offset_, in_place_.subspan(static_cast<size_t>(offset_), n));
      offset_ += n;
    } else {
      check(n <= left - carry_ && carry_ + n <= staging_.size(), "commit(", n, ") past the buffer given");
      // Whole elements to the sink; a partial one waits at the front for the rest of its bytes.
      const size_t have = carry_ + n, element = dtype_size(t.dtype), whole = have / element * element;
      sink_->take(tensor_, offset_, std::span<const uint8_t>(staging_).first(whole));
      offset_ += whole;
      carry_ = have - whole;
      if (carry_) std::memmove(staging_.data(), staging_.data() + whole, carry_);
    }
    position_ += n;
    advance();
    if (done()) staging_ = {};
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("safetensors: ", 0) == 0) throw;
    throw Error("safetensors: " + what);
  }
}

size_t SafetensorsReader::push(std::span<const uint8_t> bytes) {
  size_t taken = 0;
  while (taken < bytes.size()) {
    const std::span<uint8_t> to = buffer();
    if (to.empty()) {
      if (parsed_ && sink_ == nullptr) return taken;  // the header is in: the caller sets a sink, then pushes on
      throw Error(detail::cat("safetensors: the tensors end at byte ", header_.file_size - header_.data_begin,
                              " of the data buffer but ", bytes.size() - taken,
                              " more bytes follow, expected no bytes after the last tensor"));
    }
    const size_t n = std::min(to.size(), bytes.size() - taken);
    std::memcpy(to.data(), bytes.data() + taken, n);
    commit(n);
    taken += n;
  }
  return taken;
}

void SafetensorsReader::finish() const {
  if (done()) return;
  const uint64_t expected = parsed_ ? header_.file_size : position_ < 8 ? 8 : head_.size();
  throw Error(detail::cat("safetensors: the file ended after ", position_, " of the ", expected, " bytes ",
                          parsed_ ? "its header gives" : "its header needs", " (truncated?)"));
}

namespace {
struct FileDescriptor {
  int fd;
  ~FileDescriptor() { ::close(fd); }
};

// The loop behind read_safetensors_stream, with errors not yet prefixed by the path.
void stream_fd(int fd, const std::function<void(SafetensorsReader&)>& on_header) {
  struct stat st {};
  check(::fstat(fd, &st) == 0, "cannot stat it: ", os_error(errno));
  check(S_ISREG(st.st_mode), "is not a regular file (a directory?)");
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // read-ahead for a front-to-back pass
#endif
  const auto size = static_cast<uint64_t>(st.st_size);
  std::array<uint8_t, 9> first{};
  const ssize_t got = ::pread(fd, first.data(), first.size(), 0);
  check(got >= 0, "read failed: ", os_error(errno));
  check_not_pickle(std::span<const uint8_t>(first.data(), static_cast<size_t>(got)));
  check(size >= 8, "the file is ", size,
        " bytes, shorter than the 8-byte header length every safetensors file starts with (truncated?)");
  SafetensorsReader reader(size);
  bool told = false;
  for (;;) {
    if (reader.has_header() && !told) {
      told = true;
      on_header(reader);
      if (!reader.has_sink()) return;  // the caller wanted the header only
    }
    const std::span<uint8_t> to = reader.buffer();
    if (to.empty()) break;
    const ssize_t n = ::read(fd, to.data(), to.size());
    if (n < 0 && errno == EINTR) continue;
    check(n >= 0, "read failed: ", os_error(errno));
    check(n > 0, "the file shrank while being read (", reader.position(), " of ", size, " bytes)");
    reader.commit(static_cast<size_t>(n));
  }
  reader.finish();
  uint8_t extra = 0;
  check(::read(fd, &extra, 1) == 0, "the file grew while being read (more than ", size, " bytes)");
}
}  // namespace

void read_safetensors_stream(const std::string& path, const std::function<void(SafetensorsReader&)>& on_header) {
  const std::string where = "safetensors file '" + path + "': ";
  // POSIX I/O rather than iostreams: it tells a directory from a file and gives errno for the message.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, where, "cannot open it: ", os_error(errno));
  const FileDescriptor closer{fd};
  try {
    stream_fd(fd, on_header);
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.rfind(where, 0) == 0) throw;
    if (what.rfind("safetensors: ", 0) == 0) what = what.substr(13);
    throw Error(where + what);
  }
}

namespace {
// read_safetensors's sink: each tensor's bytes read straight into its entry.
class EntrySink : public TensorSink {
 public:
  explicit EntrySink(SafetensorsFile& file) : file_(file) {}
  std::span<uint8_t> place(size_t i) override { return file_.tensors[i].bytes; }
  void take(size_t, uint64_t, std::span<const uint8_t>) override {}

 private:
  SafetensorsFile& file_;
};
}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile file;
  EntrySink sink(file);
  read_safetensors_stream(path, [&](SafetensorsReader& reader) {
    const SafetensorsHeader& h = reader.header();
    file.metadata = h.metadata;
    file.tensors.reserve(h.tensors.size());
    for (const TensorInfo& t : h.tensors)
      file.tensors.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(static_cast<size_t>(t.size()))});
    reader.set_sink(&sink);
  });
  return file;
}

TensorRef::TensorRef(std::string name, std::vector<int64_t> shape, std::span<const float> data)
    : name(std::move(name)),
      shape(std::move(shape)),
      dtype("F32"),
      bytes(reinterpret_cast<const uint8_t*>(data.data()), data.size_bytes()),
      count(data.size()) {}
TensorRef::TensorRef(std::string name, std::vector<int64_t> shape, std::span<const int32_t> data)
    : name(std::move(name)),
      shape(std::move(shape)),
      dtype("I32"),
      bytes(reinterpret_cast<const uint8_t*>(data.data()), data.size_bytes()),
      count(data.size()) {}
TensorRef::TensorRef(std::string name, std::vector<int64_t> shape, std::span<const int64_t> data)
    : name(std::move(name)),
      shape(std::move(shape)),
      dtype("I64"),
      bytes(reinterpret_cast<const uint8_t*>(data.data()), data.size_bytes()),
      count(data.size()) {}
TensorRef::TensorRef(std::string name, std::vector<int64_t> shape, std::string dtype_, std::span<const uint8_t> data)
    : name(std::move(name)),
      shape(std::move(shape)),
      dtype(std::move(dtype_)),
      bytes(data),
      count(data.size() / dtype_size(dtype)) {}

namespace {

// What serialize_safetensors and the streaming write share: the checks, the tensors in file order and the
// header's bytes (the 8-byte length, the JSON, its padding).
std::vector<uint8_t> header_of(const std::vector<TensorRef>& tensors,
                               const std::map<std::string, std::string>& metadata, std::vector<const TensorRef*>& order,
                               uint64_t& data_size) {
  std::set<std::string_view> names;
  for (const TensorRef& t : tensors) {
    check(t.name != kMetadataKey, "safetensors: a tensor cannot be named \"__metadata__\" (reserved for metadata)");
    check(names.insert(t.name).second, "safetensors: two tensors are named '", t.name, "', expected unique names");
    for (int64_t d : t.shape)
      check(d >= 0, "safetensors: tensor '", t.name, "' has shape ", shape_string(t.shape),
            ", expected non-negative dims");
    const auto numel = checked_numel(t.shape);
    check(numel && *numel == t.count, "safetensors: tensor '", t.name, "' has shape ", shape_string(t.shape), " but ",
          t.count, " values, expected as many values as the shape holds");
  }

  // Widest elements first: the buffer starts 8-aligned, so then every tensor is aligned to its element
  // size and readers that map the file can view it in place (the reference writer does the same).
  order.clear();
  for (const TensorRef& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const TensorRef* a, const TensorRef* b) { return dtype_size(a->dtype) > dtype_size(b->dtype); });

  // ordered_json: "__metadata__" first and tensors in buffer order, so `head -c` on a file reads well.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const TensorRef* t : order) {
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::cat("safetensors: a tensor name or metadata string is not valid UTF-8 (", e.what(), ")"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the buffer starts 8-aligned
  // The readers' limit (this one's and the reference's): a larger header would be written and never read back.
  check(text.size() <= kMaxHeaderBytes, "safetensors: the header (tensor names and metadata) would be ", text.size(),
        " bytes, over the ", kMaxHeaderBytes, "-byte limit readers have: shorten the metadata");

  std::vector<uint8_t> out(8 + text.size());
  const uint64_t header_size = text.size();
  std::memcpy(out.data(), &header_size, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  data_size = offset;
  return out;
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<TensorRef>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorRef*> order;
  uint64_t data_size = 0;
  std::vector<uint8_t> out = header_of(tensors, metadata, order, data_size);
  out.reserve(out.size() + data_size);
  for (const TensorRef* t : order) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
  return out;
}

void write_safetensors_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  io::write_file_atomic(path, [&](int fd) { return io::write_all(fd, bytes); });
}

void write_safetensors_atomic(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorRef*> order;
  uint64_t data_size = 0;
  const std::vector<uint8_t> header = header_of(tensors, metadata, order, data_size);
  io::write_file_atomic(path, [&](int fd) {
    if (!io::write_all(fd, header)) return false;
    for (const TensorRef* t : order)
      if (!io::write_all(fd, t->bytes)) return false;
    return true;
  });
}

}  // namespace qkv
