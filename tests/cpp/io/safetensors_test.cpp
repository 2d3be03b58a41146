// The safetensors layer: round trips, a file written by Python's stdlib (tests/fixtures/safetensors), every
// validation error by its message, truncations and byte flips that must end in qkv::Error, and the atomic
// save that never loses the file already on disk.
#include "qkv/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "test_util.h"

namespace qkv::safetensors_test {
namespace {

namespace fs = std::filesystem;

// A file built by hand: the 8-byte little-endian length, the header text as given (no padding), the buffer.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& buffer = {}) {
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + buffer.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

// The message of the qkv::Error that parsing `bytes` throws; fails the test when it parses.
std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    parse_safetensors(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed without error";
  return "";
}

template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no qkv::Error thrown";
  return "";
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Sample {
  std::vector<float> w{1.5f, -2.f, 3.25f, 0.f, -0.f, 1e-30f};
  std::vector<float> scalar{3.5f};
  std::vector<float> empty{};
  std::vector<float> v{1, 2, 3, 4, 5};
  std::vector<int64_t> ids{0, -1, int64_t{1} << 40, 50256};
  std::vector<int32_t> ids32{7, -7, std::numeric_limits<int32_t>::max()};
  std::map<std::string, std::string> metadata{{"config", R"({"d_model": 8})"}, {"unicode", "λ ✓"}, {"empty", ""}};

  std::vector<uint8_t> bytes() const {
    return serialize_safetensors({{"w", {2, 3}, w},
                                  {"scalar", {}, scalar},
                                  {"empty", {0, 4}, empty},
                                  {"v", {5}, v},
                                  {"ids", {2, 2}, ids},
                                  {"ids32", {3}, ids32}},
                                 metadata);
  }
};

TEST(Safetensors, RoundTripKeepsNamesShapesValuesAndMetadata) {
  const Sample s;
  const std::vector<uint8_t> bytes = s.bytes();
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u) << "the header is padded so the buffer starts 8-aligned";

  const SafetensorsFile file = parse_safetensors(bytes);
  EXPECT_EQ(file.metadata, s.metadata);
  // Widest dtype first (I64), then the others in the order given.
  std::vector<std::string> names;
  for (const auto& t : file.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ids", "w", "scalar", "empty", "v", "ids32"}));

  EXPECT_EQ(file.at("w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.at("w").dtype, "F32");
  EXPECT_EQ(file.floats("w"), s.w);
  EXPECT_TRUE(std::signbit(file.floats("w")[4])) << "-0 keeps its sign";
  EXPECT_EQ(file.at("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(file.at("scalar").numel(), 1);
  EXPECT_EQ(file.floats("scalar"), s.scalar);
  EXPECT_EQ(file.at("empty").shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(file.floats("empty").empty());
  EXPECT_EQ(file.floats("v"), s.v);
  EXPECT_EQ(file.at("ids").dtype, "I64");
  EXPECT_EQ(file.ints("ids"), s.ids);
  EXPECT_EQ(file.at("ids32").dtype, "I32");
  EXPECT_EQ(file.ints("ids32"), (std::vector<int64_t>{7, -7, std::numeric_limits<int32_t>::max()}));

  // Every tensor's offset is a multiple of its element size, so mapping readers can view it in place.
  const auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(header_size));
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(entry["data_offsets"][0].get<uint64_t>() % dtype_size(entry["dtype"].get<std::string>()), 0u) << name;
  }
}

TEST(Safetensors, NoTensorsAndNoMetadata) {
  const std::vector<uint8_t> bytes = serialize_safetensors({}, {});
  EXPECT_EQ(bytes.size(), 16u) << "\"{}\" padded to 8 bytes after the length";
  const SafetensorsFile file = parse_safetensors(bytes);
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
  EXPECT_TRUE(parse_safetensors(make_file(R"({"__metadata__": null})")).metadata.empty());
}

// A header past the readers' 100 MB limit is refused when written, not only when read back: metadata of 100 MB does
// not save; just under the limit it saves and reads.
TEST(Safetensors, AHeaderTheReadersRefuseIsNotWritten) {
  const std::string big(100'000'000, 'x');
  const std::string msg = test::message_of([&] { serialize_safetensors({}, {{"k", big}}); });
  EXPECT_NE(msg.find("over the 100000000-byte limit readers have"), std::string::npos) << msg.substr(0, 200);
  const std::string fits(99'999'000, 'x');
  EXPECT_EQ(parse_safetensors(serialize_safetensors({}, {{"k", fits}})).metadata.at("k").size(), fits.size());
}

// Written by tests/fixtures/safetensors/make_samples.py with Python's struct and json, not by qkv.
TEST(Safetensors, ReadsTheFileWrittenByPython) {
  const fs::path path = fs::path(__FILE__).parent_path() / "../../fixtures/safetensors/mixed_dtypes.safetensors";
  const SafetensorsFile file = read_safetensors(path.string());
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(nlohmann::json::parse(file.metadata.at("config"))["heads"], 2);

  EXPECT_EQ(file.at("half").shape, (std::vector<int64_t>{3, 3}));
  const std::vector<float> half = file.floats("half");
  ASSERT_EQ(half.size(), 9u);
  EXPECT_EQ(half[0], 1.f);
  EXPECT_EQ(half[1], -2.5f);
  EXPECT_EQ(half[2], 65504.f);
  EXPECT_EQ(half[3], std::ldexp(1.f, -14)) << "smallest normal";
  EXPECT_EQ(half[4], std::ldexp(1.f, -24)) << "smallest subnormal";
  EXPECT_EQ(half[5], 0.f);
  EXPECT_TRUE(std::signbit(half[5]));
  EXPECT_EQ(half[6], std::numeric_limits<float>::infinity());
  EXPECT_EQ(half[7], 0.333251953125f);
  EXPECT_TRUE(std::isnan(half[8]));

  EXPECT_EQ(file.floats("brain"), (std::vector<float>{1.f, -3.140625f, std::ldexp(1.f, 100)}));
  EXPECT_EQ(file.floats("double"), (std::vector<float>{0.1f, -std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(file.ints("ids"), (std::vector<int64_t>{0, -1, int64_t{1} << 40, 50256}));
  EXPECT_EQ(file.ints("ids32"), (std::vector<int64_t>{7, -7, 2147483647}));
  EXPECT_EQ(file.ints("bytes"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(file.ints("mask"), (std::vector<int64_t>{1, 0, 0, 1}));
}

// Every one of the 65536 half-precision bit patterns, against the definition computed in double.
TEST(Safetensors, F16AllBitPatterns) {
  std::vector<uint8_t> buffer(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    buffer[2 * h] = static_cast<uint8_t>(h & 0xff);
    buffer[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  const SafetensorsFile file =
      parse_safetensors(make_file(R"({"h": {"dtype": "F16", "shape": [65536], "data_offsets": [0, 131072]}})", buffer));
  const std::vector<float> got = file.floats("h");
  for (uint32_t h = 0; h < 65536; ++h) {
    const int exponent = (h >> 10) & 31;
    const int mantissa = h & 1023;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 31) {
      ASSERT_EQ(std::isnan(got[h]), mantissa != 0) << h;
      if (mantissa == 0) {
        ASSERT_EQ(got[h], sign * HUGE_VAL) << h;
      }
      continue;
    }
    const double want =
        exponent == 0 ? sign * std::ldexp(mantissa, -24) : sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    ASSERT_EQ(static_cast<double>(got[h]), want) << "bits 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(got[h]), (h & 0x8000) != 0) << h;
  }
}

TEST(Safetensors, LookupAndConversionErrors) {
  const SafetensorsFile file = parse_safetensors(Sample().bytes());
  const std::string missing = error_of([&] { file.at("encoder.weight"); });
  EXPECT_NE(missing.find("no tensor named 'encoder.weight'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("it has 6 tensors: 'ids', 'w'"), std::string::npos) << missing;
  EXPECT_FALSE(file.contains("encoder.weight"));
  EXPECT_TRUE(file.contains("w"));

  const std::string not_float = error_of([&] { file.floats("ids"); });
  EXPECT_NE(not_float.find("'ids' has dtype I64, expected a float dtype"), std::string::npos) << not_float;
  const std::string not_int = error_of([&] { file.ints("w"); });
  EXPECT_NE(not_int.find("'w' has dtype F32, expected an integer dtype"), std::string::npos) << not_int;

  std::vector<uint8_t> big(8, 0xff);
  const SafetensorsFile u64 =
      parse_safetensors(make_file(R"({"u": {"dtype": "U64", "shape": [1], "data_offsets": [0, 8]}})", big));
  const std::string too_big = error_of([&] { u64.ints("u"); });
  EXPECT_NE(too_big.find("18446744073709551615, larger than the largest int64"), std::string::npos) << too_big;

  EXPECT_EQ(dtype_size("BF16"), 2u);
  EXPECT_NE(error_of([] { dtype_size("F4"); }).find("unknown safetensors dtype \"F4\", expected one of BOOL"),
            std::string::npos);
}

struct BadFile {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* message;  // a distinctive part of the qkv::Error's message
};

std::vector<uint8_t> with_length(uint64_t n, size_t total) {
  std::vector<uint8_t> out(total, ' ');
  std::memcpy(out.data(), &n, 8);
  return out;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\": {\"dtype\": " + dtype + ", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}";
}

TEST(Safetensors, RejectsMalformedFilesWithMessagesThatSayWhat) {
  const std::vector<uint8_t> b8(8), b12(12);
  const std::vector<BadFile> cases = {
      {"short", {1, 2, 3, 4, 5}, "the file is 5 bytes, shorter than the 8-byte header length"},
      {"absurd length", with_length(200'000'000, 64), "header length 200000000 is over the 100000000-byte limit"},
      {"length past end", with_length(100, 28), "header length 100 runs past the end of the file (20 bytes follow"},
      {"empty header", make_file(""), "does not start with '{'"},
      {"foreign header", make_file("[1, 2]"), "does not start with '{'"},
      {"not json", make_file(R"({"a": })"), "the header is not valid JSON"},
      {"trailing garbage", make_file(R"({} x)"), "the header is not valid JSON"},
      {"bad utf-8", make_file("{\"\xff\": 1}"), "the header is not valid JSON"},
      {"entry not object", make_file(R"({"a": 5})"), "tensor 'a': entry is a JSON number, expected an object"},
      {"missing dtype", make_file(R"({"a": {"shape": [], "data_offsets": [0, 0]}})"), "tensor 'a': missing \"dtype\""},
      {"missing shape", make_file(R"({"a": {"dtype": "F32", "data_offsets": [0, 0]}})"),
       "tensor 'a': missing \"shape\""},
      {"missing offsets", make_file(R"({"a": {"dtype": "F32", "shape": [0]}})"),
       "tensor 'a': missing \"data_offsets\""},
      {"dtype not string", make_file("{" + entry("a", "32", "[0]", "[0, 0]") + "}"),
       "\"dtype\" is a JSON number, expected a string"},
      {"unknown dtype", make_file("{" + entry("a", "\"Q4\"", "[0]", "[0, 0]") + "}"),
       "tensor 'a': unknown dtype \"Q4\", expected one of BOOL, U8"},
      {"shape not array", make_file("{" + entry("a", "\"F32\"", "\"2\"", "[0, 0]") + "}"),
       "\"shape\" is a JSON string, expected an array"},
      {"fractional dim", make_file("{" + entry("a", "\"F32\"", "[2.5]", "[0, 10]") + "}"),
       "dim 0 of \"shape\" is a JSON number (2.5), expected a non-negative integer"},
      {"negative dim", make_file("{" + entry("a", "\"F32\"", "[2, -1]", "[0, 0]") + "}"),
       "dim 1 of \"shape\" is negative (-1)"},
      {"dim beyond int64", make_file("{" + entry("a", "\"F32\"", "[18446744073709551615]", "[0, 0]") + "}"),
       "larger than the largest int64"},
      {"numel overflow", make_file("{" + entry("a", "\"F32\"", "[4294967296, 4294967296, 16]", "[0, 8]") + "}", b8),
       "needs more than 2^64 bytes"},
      {"bytes overflow", make_file("{" + entry("a", "\"F64\"", "[4611686018427387904]", "[0, 8]") + "}", b8),
       "needs more than 2^64 bytes"},
      {"offsets not pair", make_file("{" + entry("a", "\"F32\"", "[0]", "[0]") + "}"),
       "\"data_offsets\" is [0], expected [begin, end]"},
      {"negative offset", make_file("{" + entry("a", "\"F32\"", "[1]", "[-4, 0]") + "}"),
       "begin of \"data_offsets\" is negative"},
      {"offset not integer", make_file("{" + entry("a", "\"F32\"", "[1]", "[0, \"4\"]") + "}"),
       "end of \"data_offsets\" is a JSON string"},
      {"end before begin", make_file("{" + entry("a", "\"F32\"", "[1]", "[8, 4]") + "}", b8),
       "data_offsets [8, 4] end before begin"},
      {"past buffer", make_file("{" + entry("a", "\"F32\"", "[100]", "[0, 400]") + "}", b8),
       "data_offsets [0, 400] run past the 8-byte data buffer"},
      {"huge offsets",
       make_file("{" + entry("a", "\"F32\"", "[1]", "[18446744073709551612, 18446744073709551615]") + "}"),
       "run past the 0-byte data buffer"},
      {"size mismatch", make_file("{" + entry("a", "\"F32\"", "[3]", "[0, 8]") + "}", b8),
       "tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8"},
      {"overlap",
       make_file("{" + entry("a", "\"F32\"", "[2]", "[0, 8]") + ", " + entry("b", "\"F32\"", "[2]", "[4, 12]") + "}",
                 b12),
       "tensor 'b' at data_offsets [4, 12] overlaps tensor 'a' which ends at 8"},
      {"gap",
       make_file("{" + entry("a", "\"F32\"", "[1]", "[0, 4]") + ", " + entry("b", "\"F32\"", "[1]", "[8, 12]") + "}",
                 b12),
       "tensor 'b' starts at 8 but the previous tensor ends at 4"},
      {"trailing bytes", make_file("{" + entry("a", "\"F32\"", "[1]", "[0, 4]") + "}", b8),
       "the tensors end at byte 4 of the data buffer but it holds 8 bytes"},
      {"metadata value not string", make_file(R"({"__metadata__": {"n": 1}})"),
       "metadata value for \"n\" is a JSON number (1), expected a string"},
      {"metadata not object", make_file(R"({"__metadata__": ["x"]})"),
       "\"__metadata__\" is a JSON array, expected an object of string values"},
      {"duplicate tensor",
       make_file("{" + entry("a", "\"F32\"", "[1]", "[0, 4]") + ", " + entry("a", "\"F32\"", "[1]", "[4, 8]") + "}",
                 b8),
       "the header has the key \"a\" twice"},
      {"duplicate field",
       make_file(R"({"a": {"dtype": "F32", "dtype": "I32", "shape": [], "data_offsets": [0, 4]}})",
                 std::vector<uint8_t>(4)),
       "the header has the key \"dtype\" twice"},
  };
  for (const BadFile& c : cases) {
    const std::string message = parse_error(c.bytes);
    EXPECT_EQ(message.rfind("safetensors: ", 0), 0u) << c.what << ": " << message;
    EXPECT_NE(message.find(c.message), std::string::npos)
        << c.what << ": expected the message to contain\n  " << c.message << "\nbut it is\n  " << message;
  }
}

// Every strict prefix of a valid file is an error (the tensors must fill the buffer exactly), never a crash
// or a quietly shorter file.
TEST(Safetensors, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = Sample().bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_THROW(parse_safetensors(prefix), Error) << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW(parse_safetensors(bytes));
}

// A small fuzz by hand until the libFuzzer target exists: each byte set to several values must either
// parse or raise qkv::Error (run under the sanitizer preset, any out-of-bounds read also fails here).
TEST(Safetensors, CorruptedBytesParseOrThrowError) {
  const std::vector<uint8_t> bytes = Sample().bytes();
  int parsed = 0, rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t value : {0x00, 0x01, 0x20, 0x22, 0x2d, 0x39, 0x5b, 0x7b, 0x7d, 0x80, 0xff}) {
      std::vector<uint8_t> corrupt = bytes;
      corrupt[i] = value;
      try {
        const SafetensorsFile file = parse_safetensors(corrupt);
        for (const TensorEntry& t : file.tensors) {
          ASSERT_EQ(t.bytes.size(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype)) << t.name;
        }
        ++parsed;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(parsed, 0) << "some changes (inside values and strings) leave a valid file";
  EXPECT_GT(rejected, 0);
}

TEST(Safetensors, SerializeRejectsWhatCannotBeRead) {
  const std::vector<float> four(4);
  EXPECT_NE(error_of([&] {
              serialize_safetensors({{"a", {4}, four}, {"a", {2, 2}, four}}, {});
            }).find("two tensors are named 'a'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              serialize_safetensors({{"__metadata__", {4}, four}}, {});
            }).find("reserved for metadata"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              serialize_safetensors({{"a", {-2, -2}, four}}, {});
            }).find("tensor 'a' has shape [-2, -2], expected non-negative dims"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              serialize_safetensors({{"a", {2, 3}, four}}, {});
            }).find("tensor 'a' has shape [2, 3] but 4 values"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              serialize_safetensors({{"a", {4}, four}}, {{"k", "\xff"}});
            }).find("not valid UTF-8"),
            std::string::npos);
}

class SafetensorsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("qkv_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Names in dir_ that look like a temporary file left behind by a save.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().string());
    return out;
  }

  fs::path dir_;
};

TEST_F(SafetensorsFiles, AtomicWriteCreatesAndReplaces) {
  const std::string path = (dir_ / "model.safetensors").string();
  const std::vector<float> a{1, 2, 3}, b{4, 5, 6, 7};
  const std::vector<uint8_t> first = serialize_safetensors({{"x", {3}, a}}, {{"step", "1"}});
  const std::vector<uint8_t> second = serialize_safetensors({{"x", {2, 2}, b}}, {{"step", "2"}});

  write_safetensors_atomic(path, first);
  EXPECT_EQ(read_bytes(path), first);
  write_safetensors_atomic(path, second);
  EXPECT_EQ(read_bytes(path), second);
  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata.at("step"), "2");
  EXPECT_EQ(file.floats("x"), b);
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(SafetensorsFiles, AtomicWriteIntoMissingDirectoryNamesThePath) {
  const std::string path = (dir_ / "no_such_dir" / "model.safetensors").string();
  const std::string message = error_of([&] { write_safetensors_atomic(path, Sample().bytes()); });
  EXPECT_NE(message.find("cannot save '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(ENOENT)), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "no_such_dir"));
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(SafetensorsFiles, AtomicWriteOverADirectoryLeavesItAndNoTempFile) {
  const fs::path target = dir_ / "model.safetensors";
  fs::create_directories(target);
  const std::vector<uint8_t> inside{'k', 'e', 'e', 'p'};
  std::ofstream(target / "inside", std::ios::binary).write(reinterpret_cast<const char*>(inside.data()), 4);

  const std::string message = error_of([&] { write_safetensors_atomic(target.string(), Sample().bytes()); });
  EXPECT_NE(message.find("cannot save '" + target.string() + "': renaming"), std::string::npos) << message;
  EXPECT_NE(message.find("is unchanged"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(read_bytes(target / "inside"), inside);
  EXPECT_TRUE(leftovers().empty());
}

#if defined(__linux__)
// A disk that fills up mid-save, simulated with the file-size limit: the write fails part-way, the
// previous checkpoint must come through byte-identical and the partial temporary file must be gone.
TEST_F(SafetensorsFiles, FailedWriteLeavesTheExistingFileUntouched) {
  const std::string path = (dir_ / "model.safetensors").string();
  const std::vector<float> small{1, 2};
  const std::vector<uint8_t> before = serialize_safetensors({{"x", {2}, small}}, {{"step", "1"}});
  write_safetensors_atomic(path, before);
  ASSERT_LT(before.size(), 1024u);

  const std::vector<float> large(4096, 0.5f);
  const std::vector<uint8_t> after = serialize_safetensors({{"x", {4096}, large}}, {{"step", "2"}});
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = signal(SIGXFSZ, SIG_IGN);  // get EFBIG from write() instead of a signal
  rlimit limited = saved;
  limited.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  const std::string message = error_of([&] { write_safetensors_atomic(path, after); });
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, old_handler);

  EXPECT_NE(message.find("cannot save '" + path + "': writing"), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(EFBIG)), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(read_safetensors(path).metadata.at("step"), "1");
  EXPECT_TRUE(leftovers().empty());
}
#endif

TEST_F(SafetensorsFiles, ReadErrorsNameThePath) {
  const std::string missing = (dir_ / "missing.safetensors").string();
  const std::string not_found = error_of([&] { read_safetensors(missing); });
  EXPECT_NE(not_found.find("safetensors file '" + missing + "': cannot open it"), std::string::npos) << not_found;
  EXPECT_NE(not_found.find(std::strerror(ENOENT)), std::string::npos) << not_found;

  const std::string directory = error_of([&] { read_safetensors(dir_.string()); });
  EXPECT_NE(directory.find("is not a regular file"), std::string::npos) << directory;

  const std::string truncated_path = (dir_ / "truncated.safetensors").string();
  std::vector<uint8_t> bytes = Sample().bytes();
  bytes.erase(bytes.end() - 3, bytes.end());  // cuts into the last tensor
  write_safetensors_atomic(truncated_path, bytes);
  const std::string truncated = error_of([&] { read_safetensors(truncated_path); });
  EXPECT_EQ(truncated.rfind("safetensors file '" + truncated_path + "': ", 0), 0u) << truncated;
  EXPECT_NE(truncated.find("data buffer"), std::string::npos) << truncated;
}

}  // namespace
}  // namespace qkv::safetensors_test
