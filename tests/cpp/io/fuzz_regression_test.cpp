// Regression tests for what fuzzing the parsers found (tests/fuzz/README.md lists each finding). Each input
// once crashed a fuzz target (here: undefined behaviour under UBSan); now it must end in a qkv::Error that
// names the field. The crashing inputs are also in the fuzz seed corpus, so every fuzz run replays them.
#include <gtest/gtest.h>

#include <string>

#include "qkv/config.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "test_util.h"

namespace qkv::fuzz_regression_test {
namespace {

using test::message_of;

std::string lm_with(const std::string& field) {
  return R"({"context":64,"d_model":8,"heads":2,"vocab_size":5,"layers":1,)" + field + "}";
}

// config.cpp as_int cast a double to int64 before checking its range: 1e300 was undefined behaviour
// (UBSan: "1e+300 is outside the range of representable values of type 'long'").
TEST(FuzzRegression, ConfigIntegerFromAHugeFloat) {
  const std::string crash = R"({"context":1e300,"d_model":8,"heads":2,"vocab_size":5,"layers":1})";
  EXPECT_NE(message_of([&] { language_model_config_from_json(crash); }).find("config.context must be an integer"),
            std::string::npos);
  for (const char* v : {"-1e300", "1e19", "-9.3e18", "4611686018427387904.0"})
    EXPECT_NE(message_of([&] {
                language_model_config_from_json(lm_with(std::string("\"d_ff\":") + v));
              }).find("config.d_ff must be an integer"),
              std::string::npos)
        << v;
  // Whole floats inside the range still count, and integers beyond 32 bits are named as such.
  EXPECT_EQ(language_model_config_from_json(lm_with(R"("d_ff":32.0)")).d_ff, 32);
  EXPECT_NE(message_of([&] {
              language_model_config_from_json(lm_with(R"("d_ff":4294967296.0)"));
            }).find("config.d_ff = 4294967296 is out of range for a 32-bit integer"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              language_model_config_from_json(lm_with(R"("d_ff":18446744073709551615)"));
            }).find("config.d_ff = 18446744073709551615 is out of range for a 32-bit integer"),
            std::string::npos);
}

// The same cast one level down: narrowing a double beyond float's range to float (undefined in C++).
TEST(FuzzRegression, ConfigFloatBeyondFloatRange) {
  EXPECT_NE(message_of([&] {
              language_model_config_from_json(lm_with(R"("dropout":1e300)"));
            }).find("config.dropout = 1e+300 is out of range for a 32-bit float"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              optimizer_config_from_json(R"({"lr":-1e39})");
            }).find("optimizer.lr = -1e+39 is out of range for a 32-bit float"),
            std::string::npos);
  EXPECT_FLOAT_EQ(optimizer_config_from_json(R"({"lr":3e38})").lr, 3e38f);
}

// Tokenizer::from_json caught nlohmann's parse_error only; a number beyond a double's range throws its
// out_of_range (406) instead, which escaped as a non-qkv exception (tokenizer_fuzz, a 240 s run).
TEST(FuzzRegression, TokenizerJsonNumberBeyondADouble) {
  for (const char* text : {R"({"version": 14444444444E44444444444444444443, "kind": "word"})",
                           R"({"version": 1, "kind": "char", "vocab": [1e400]})"}) {
    const std::string message = message_of([&] { Tokenizer::from_json(text); });
    EXPECT_NE(message.find("tokenizer JSON: not valid JSON"), std::string::npos) << text << ": " << message;
    EXPECT_NE(message.find("number overflow"), std::string::npos) << text << ": " << message;
  }
}

}  // namespace
}  // namespace qkv::fuzz_regression_test
