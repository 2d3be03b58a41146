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
  TensorEntry entry;
  uint64_t begin, end;
};

Located parse_entry(const std::string& name, const json& v, uint64_t buffer_size) {
  const std::string where = "tensor '" + name + "'";
  check(v.is_object(), where, ": entry is a JSON ", v.type_name(),
        ", expected an object with \"dtype\", \"shape\" and \"data_offsets\"");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    check(v.contains(field), where, ": missing \"", field, "\" (expected \"dtype\", \"shape\" and \"data_offsets\")");

  Located out;
  out.entry.name = name;
  const json& dtype = v["dtype"];
  check(dtype.is_string(), where, ": \"dtype\" is a JSON ", dtype.type_name(), ", expected a string such as \"F32\"");
  out.entry.dtype = dtype.get<std::string>();
  const DtypeInfo* info = find_dtype(out.entry.dtype);
  check(info != nullptr, where, ": unknown dtype \"", out.entry.dtype, "\", expected one of ", known_dtypes());

  const json& shape = v["shape"];
  check(shape.is_array(), where, ": \"shape\" is a JSON ", shape.type_name(), ", expected an array of dims");
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = json_uint(shape[i], where + ": dim " + std::to_string(i) + " of \"shape\"");
    check(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": dim ", i, " of \"shape\" is ", d,
          ", larger than the largest int64");
    out.entry.shape.push_back(static_cast<int64_t>(d));
  }

  const json& offsets = v["data_offsets"];
  check(offsets.is_array() && offsets.size() == 2, where, ": \"data_offsets\" is ", offsets.dump(),
        ", expected [begin, end]");
  out.begin = json_uint(offsets[0], where + ": begin of \"data_offsets\"");
  out.end = json_uint(offsets[1], where + ": end of \"data_offsets\"");
  check(out.begin <= out.end, where, ": data_offsets [", out.begin, ", ", out.end, "] end before begin");
  check(out.end <= buffer_size, where, ": data_offsets [", out.begin, ", ", out.end, "] run past the ", buffer_size,
        "-byte data buffer (truncated file?)");

  const auto numel = checked_numel(out.entry.shape);
  const uint64_t want = out.end - out.begin;
  check(numel && *numel <= want / info->size && *numel * info->size == want, where, ": shape ",
        shape_string(out.entry.shape), " of ", out.entry.dtype, " needs ",
        numel && *numel <= std::numeric_limits<uint64_t>::max() / info->size ? std::to_string(*numel * info->size)
                                                                             : std::string("more than 2^64"),
        " bytes but data_offsets [", out.begin, ", ", out.end, "] hold ", want);
  return out;
}

SafetensorsFile parse(std::span<const uint8_t> bytes) {
  check(bytes.size() >= 8, "the file is ", bytes.size(),
        " bytes, shorter than the 8-byte header length every safetensors file starts with (truncated?)");
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  check(header_size <= kMaxHeaderBytes, "header length ", header_size, " is over the ", kMaxHeaderBytes,
        "-byte limit (not a safetensors file?)");
  const uint64_t after_length = bytes.size() - 8;
  check(header_size <= after_length, "header length ", header_size, " runs past the end of the file (", after_length,
        " bytes follow the length; truncated?)");
  check(header_size >= 2 && bytes[8] == '{', "the header does not start with '{' (header length ", header_size,
        "; not a safetensors file?)");

  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
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

  const std::span<const uint8_t> buffer = bytes.subspan(static_cast<size_t>(8 + header_size));
  SafetensorsFile file;
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
        file.metadata.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    located.push_back(parse_entry(key, value, buffer.size()));
  }

  // The tensors must tile the buffer exactly, as the reference requires: an overlap means two tensors alias
  // the same bytes, a gap or trailing bytes mean the file is not what its header says.
  std::sort(located.begin(), located.end(), [](const Located& a, const Located& b) {
    return std::tie(a.begin, a.end, a.entry.name) < std::tie(b.begin, b.end, b.entry.name);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const Located& t : located) {
    check(t.begin >= covered, "tensor '", t.entry.name, "' at data_offsets [", t.begin, ", ", t.end,
          "] overlaps tensor '", previous ? *previous : "", "' which ends at ", covered);
    check(t.begin == covered, "tensor '", t.entry.name, "' starts at ", t.begin, " but the previous tensor ends at ",
          covered, ", expected tensors to follow each other without gaps");
    covered = t.end;
    if (t.end > t.begin) previous = &t.entry.name;
  }
  check(covered == buffer.size(), "the tensors end at byte ", covered, " of the data buffer but it holds ",
        buffer.size(), " bytes, expected no bytes after the last tensor");

  file.tensors.reserve(located.size());
  for (Located& t : located) {
    const auto data = buffer.subspan(static_cast<size_t>(t.begin), static_cast<size_t>(t.end - t.begin));
    t.entry.bytes.assign(data.begin(), data.end());
    file.tensors.push_back(std::move(t.entry));
  }
  return file;
}

// std::bit_cast is missing from Emscripten's libc++ (clang 14), hence memcpy.
float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  return float_from_bits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string os_error(int err) { return std::strerror(err); }

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

std::vector<float> SafetensorsFile::floats(std::string_view name) const {
  const TensorEntry& t = at(name);
  const uint8_t* p = t.bytes.data();
  const std::string& d = t.dtype;
  check(d == "F32" || d == "F16" || d == "BF16" || d == "F64", "tensor '", name, "' has dtype ", d,
        ", expected a float dtype (F32, F16, BF16 or F64)");
  std::vector<float> out(t.bytes.size() / dtype_size(d));
  if (d == "F32") {
    if (!out.empty()) std::memcpy(out.data(), p, t.bytes.size());
  } else if (d == "F16") {
    for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_float(load<uint16_t>(p + 2 * i));
  } else if (d == "BF16") {  // the top half of a float32
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = float_from_bits(static_cast<uint32_t>(load<uint16_t>(p + 2 * i)) << 16);
  } else {  // F64, rounded as IEEE does: beyond float's range gives +-inf, as torch's .float() does
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
  }
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
  // torch.save writes a zip archive ("PK\3\4") or, before PyTorch 1.6, a bare pickle (PROTO 2..5). Loading
  // either means running the pickle's code, which qkv does not do; the user needs the one line that
  // converts it. A safetensors file has '{' at byte 8, which neither has there.
  const bool zip = bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4;
  const bool pickle = bytes.size() >= 2 && bytes[0] == 0x80 && bytes[1] >= 2 && bytes[1] <= 5;
  check(!(zip || pickle) || (bytes.size() > 8 && bytes[8] == '{'),
        "the file is a PyTorch pickle (torch.save: .pt, .pth, .bin), which qkv does not execute; save the weights "
        "as safetensors instead: safetensors.torch.save_file(model.state_dict(), \"model.safetensors\")");
  try {
    return parse(bytes);
  } catch (const Error& e) {
    throw Error(detail::cat("safetensors: ", e.what()));
  }
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string where = "safetensors file '" + path + "': ";
  // POSIX I/O rather than iostreams: it tells a directory from a file and gives errno for the message.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, where, "cannot open it: ", os_error(errno));
  std::vector<uint8_t> bytes;
  try {
    struct stat st {};
    check(::fstat(fd, &st) == 0, where, "cannot stat it: ", os_error(errno));
    check(S_ISREG(st.st_mode), where, "is not a regular file (a directory?)");
    check(static_cast<uint64_t>(st.st_size) <= std::numeric_limits<size_t>::max(), where, "is ", st.st_size,
          " bytes, too large for this build's address space");
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (got < 0 && errno == EINTR) continue;
      check(got >= 0, where, "read failed: ", os_error(errno));
      check(got > 0, where, "the file shrank while being read (", done, " of ", bytes.size(), " bytes)");
      done += static_cast<size_t>(got);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  try {
    return parse(bytes);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
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

std::vector<uint8_t> serialize_safetensors(const std::vector<TensorRef>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
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
  std::vector<const TensorRef*> order;
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

  std::vector<uint8_t> out(8);
  const uint64_t header_size = text.size();
  std::memcpy(out.data(), &header_size, 8);
  out.reserve(8 + text.size() + offset);
  out.insert(out.end(), text.begin(), text.end());
  for (const TensorRef* t : order) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
  return out;
}

namespace {

// Writes all of `bytes` to `fd`, retrying short writes; false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t put = ::write(fd, bytes.data(), bytes.size());
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return false;
    if (put == 0) {  // no progress and no error: treat as a full device rather than loop forever
      errno = ENOSPC;
      return false;
    }
    bytes = bytes.subspan(static_cast<size_t>(put));
  }
  return true;
}

// A name beside `path` that no other writer (thread or process) picks: pid, time and a counter, and
// O_EXCL on open in case they still collide.
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return detail::cat(path, ".tmp-", ::getpid(), "-", now, "-", counter.fetch_add(1));
}

}  // namespace

void write_safetensors_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string where = "cannot save '" + path + "': ";
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temp = temp_name(path);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  check(fd >= 0, where, "cannot create the temporary file '", temp, "': ", os_error(errno));

  // From here on a failure removes the temporary file; `path` itself has not been touched.
  auto fail = [&](const char* step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw Error(detail::cat(where, step, " '", temp, "' failed: ", os_error(err), "; '", path, "' is unchanged"));
  };
  if (!write_all(fd, bytes)) fail("writing");
  // fsync before rename: otherwise a crash can leave the new name pointing at a file whose data never
  // reached the disk, which is the one outcome the temporary file exists to prevent.
  if (::fsync(fd) != 0) fail("flushing");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("closing");
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("renaming");

    // Make the rename itself durable. Best effort: the file is already in place, and some file systems
    // (and Emscripten's) cannot sync a directory, which is no reason to report a failed save.
#ifdef O_DIRECTORY
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
#endif
}

}  // namespace qkv
