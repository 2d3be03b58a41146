// Checkpoint checksums (io/checksum.h): CRC-32 against its published check value, every saved checkpoint
// carries one per tensor, a flipped byte anywhere in a tensor is refused naming that tensor (and the file),
// and files without checksums (older checkpoints, PyTorch's) still load.
#include "io/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "test_util.h"

namespace qkv::checksum_test {
namespace {

using test::message_of;

LanguageModelConfig small_lm() { return {.vocab_size = 11, .context = 8, .d_model = 16, .heads = 2, .layers = 2}; }

// Where tensor `index` (in buffer order, as parse returns them) starts in the file.
size_t tensor_offset(const std::vector<uint8_t>& bytes, size_t index) {
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const auto file = parse_safetensors(bytes);
  size_t offset = 8 + header;
  for (size_t i = 0; i < index; ++i) offset += file.tensors[i].bytes.size();
  return offset;
}

TEST(Checksum, Crc32MatchesTheStandardCheckValue) {
  const std::string check = "123456789";  // the CRC catalogue's check input for CRC-32/ISO-HDLC
  const std::span<const uint8_t> b(reinterpret_cast<const uint8_t*>(check.data()), check.size());
  EXPECT_EQ(io::crc32(b), 0xCBF43926u);
  EXPECT_EQ(io::crc32({}), 0u);
  EXPECT_EQ(io::crc32(b.subspan(4), io::crc32(b.first(4))), 0xCBF43926u);  // continues across pieces
}

TEST(Checksum, EverySavedTensorHasOne) {
  LanguageModel lm(small_lm());
  for (bool with_optimizer : {false, true}) {
    const auto file = parse_safetensors(lm.save(with_optimizer));
    ASSERT_TRUE(file.metadata.count(io::kChecksumKey));
    const auto& sums = file.metadata.at(io::kChecksumKey);
    for (const auto& t : file.tensors) EXPECT_NE(sums.find("\"" + t.name + "\""), std::string::npos) << t.name;
    EXPECT_NO_THROW(io::verify_checksums(file));
  }
}

TEST(Checksum, AFlippedByteInAnyTensorIsRefusedNamingIt) {
  LanguageModel lm(small_lm());
  const auto bytes = lm.save(true);
  const auto file = parse_safetensors(bytes);
  ASSERT_GT(file.tensors.size(), 4u);
  int checked = 0;
  for (size_t i = 0; i < file.tensors.size(); i += 3) {
    if (file.tensors[i].bytes.empty()) continue;
    auto bad = bytes;
    bad[tensor_offset(bytes, i) + file.tensors[i].bytes.size() / 2] ^= 0x10;
    const std::string message = message_of([&] { LanguageModel::load(bad); });
    EXPECT_NE(message.find("tensor '" + file.tensors[i].name + "' is corrupt"), std::string::npos) << message;
    EXPECT_NE(message_of([&] { lm.load_weights(bad); }).find("is corrupt"), std::string::npos);
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(Checksum, ACorruptFileIsRefusedNamingThePathAndTheModelIsUnchanged) {
  const auto dir = std::filesystem::temp_directory_path() / "qkv_checksum_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "lm.safetensors").string();
  LanguageModel lm(small_lm());
  lm.save_file(path);
  auto bytes = io::read_file(path);
  bytes[bytes.size() - 3] ^= 0x01;  // the last tensor's last bytes
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const std::string message = message_of([&] { LanguageModel::load_file(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("is corrupt"), std::string::npos) << message;
  auto config = small_lm();
  config.seed = 99;
  LanguageModel other(config);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  const auto before = other.logits(ids, 1, 4);
  EXPECT_THROW(other.load_state(bytes), Error);
  EXPECT_EQ(other.logits(ids, 1, 4), before);  // nothing copied from a corrupt file
  std::filesystem::remove_all(dir);
}

TEST(Checksum, FilesWithoutChecksumsStillLoad) {
  LanguageModel lm(small_lm());
  const auto file = parse_safetensors(lm.save(false));
  std::vector<std::vector<float>> keep;
  std::vector<TensorRef> refs;
  for (const auto& t : file.tensors) {
    keep.push_back(file.floats(t.name));
    refs.emplace_back(t.name, t.shape, std::span<const float>(keep.back()));
  }
  auto meta = file.metadata;
  meta.erase(io::kChecksumKey);  // as a checkpoint saved before checksums existed
  const auto old = serialize_safetensors(refs, meta);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  EXPECT_EQ(LanguageModel::load(old)->logits(ids, 1, 5), lm.logits(ids, 1, 5));
}

TEST(Checksum, MalformedChecksumMetadataIsRefused) {
  const std::vector<float> w = {1.f, 2.f};
  const auto with_sums = [&](const std::string& sums) {
    return parse_safetensors(
        serialize_safetensors({TensorRef("w", {2}, std::span<const float>(w))}, {{io::kChecksumKey, sums}}));
  };
  EXPECT_NE(message_of([&] { io::verify_checksums(with_sums("{")); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(message_of([&] { io::verify_checksums(with_sums("[]")); }).find("expected an object"), std::string::npos);
  EXPECT_NE(message_of([&] { io::verify_checksums(with_sums("{}")); }).find("lists 0 tensors but the file holds 1"),
            std::string::npos);
  EXPECT_NE(message_of([&] { io::verify_checksums(with_sums(R"({"v":"00000000"})")); }).find("tensor 'w' has no CRC"),
            std::string::npos);
  EXPECT_NE(message_of([&] { io::verify_checksums(with_sums(R"({"w":7})")); }).find("expected a string"),
            std::string::npos);
  EXPECT_NE(message_of([&] { io::verify_checksums(with_sums(R"({"w":"00000000"})")); }).find("tensor 'w' is corrupt"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::checksum_test
