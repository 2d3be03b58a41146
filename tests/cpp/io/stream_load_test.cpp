// Streaming loads: SafetensorsReader hands every tensor's bytes over exactly whatever the pieces' sizes;
// CheckpointLoader and load_file build the same model as load(bytes), converting F16/BF16/F64 on the way; a model
// so loaded holds its weights only until it trains; truncated, overlong and corrupt streams raise qkv::Error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "qkv/checkpoint_loader.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/safetensors.h"
#include "qkv/seq2seq.h"
#include "test_util.h"

namespace qkv::stream_load_test {
namespace {

using test::message_of;

LanguageModelConfig lm_config() {
  LanguageModelConfig c{.vocab_size = 11, .context = 8, .d_model = 16, .heads = 2, .layers = 2};
  c.tie_head = false;
  return c;
}

const std::vector<int32_t> kIds = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3, 4, 5};

// Collects what a reader hands over, per tensor, and checks the order of the calls.
class Recorder : public TensorSink {
 public:
  explicit Recorder(const SafetensorsHeader& h, bool in_place) : h_(h), in_place_(in_place) {
    for (const auto& t : h.tensors) got.emplace_back(static_cast<size_t>(t.size()));
  }
  std::span<uint8_t> place(size_t i) override { return in_place_ ? std::span<uint8_t>(got[i]) : std::span<uint8_t>(); }
  void take(size_t i, uint64_t offset, std::span<const uint8_t> bytes) override {
    EXPECT_EQ(i, current);
    EXPECT_EQ(offset, done);
    if (!in_place_) {
      EXPECT_EQ(bytes.size() % dtype_size(h_.tensors[i].dtype), 0u) << "staged pieces are whole elements";
      std::memcpy(got[i].data() + offset, bytes.data(), bytes.size());
    } else {
      EXPECT_EQ(bytes.data(), got[i].data() + offset) << "in place: the bytes are where place() said";
    }
    done += bytes.size();
  }
  void end(size_t i) override {
    EXPECT_EQ(i, current);
    EXPECT_EQ(done, h_.tensors[i].size());
    ++current;
    done = 0;
  }
  std::vector<std::vector<uint8_t>> got;
  size_t current = 0;
  uint64_t done = 0;

 private:
  const SafetensorsHeader& h_;
  bool in_place_;
};

std::vector<uint8_t> mixed_file() {
  // Tensors of several dtypes, one empty, sizes that are not multiples of the pieces.
  std::vector<float> a(37), b;
  std::vector<int64_t> c(5);
  std::vector<int32_t> d(13);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i) - 3.f;
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<int64_t>(i) * 1000000007LL;
  for (size_t i = 0; i < d.size(); ++i) d[i] = -static_cast<int32_t>(i);
  return serialize_safetensors(
      {TensorRef("a", {37}, std::span<const float>(a)), TensorRef("b", {0, 4}, std::span<const float>(b)),
       TensorRef("c", {5}, std::span<const int64_t>(c)), TensorRef("d", {13}, std::span<const int32_t>(d))},
      {{"k", "v"}});
}

TEST(StreamLoad, ReaderHandsOverEveryTensorExactlyForAnyPieceSize) {
  const auto bytes = mixed_file();
  const SafetensorsFile whole = parse_safetensors(bytes);
  for (bool in_place : {true, false})
    for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, size_t{64}, bytes.size()}) {
      SafetensorsReader reader(bytes.size());
      std::unique_ptr<Recorder> rec;
      for (size_t at = 0; at < bytes.size();) {
        at += reader.push(std::span<const uint8_t>(bytes).subspan(at, std::min(piece, bytes.size() - at)));
        if (reader.has_header() && !rec) {
          EXPECT_EQ(reader.header().metadata.at("k"), "v");
          EXPECT_EQ(reader.header().file_size, bytes.size());
          rec = std::make_unique<Recorder>(reader.header(), in_place);
          reader.set_sink(rec.get());
        }
      }
      reader.finish();
      ASSERT_TRUE(rec);
      ASSERT_EQ(rec->current, whole.tensors.size()) << "piece " << piece;
      for (size_t i = 0; i < whole.tensors.size(); ++i) {
        EXPECT_EQ(reader.header().tensors[i].name, whole.tensors[i].name);
        EXPECT_EQ(rec->got[i], whole.tensors[i].bytes) << whole.tensors[i].name << " piece " << piece;
      }
    }
}

TEST(StreamLoad, ReaderRefusesTruncatedAndOverlongStreams) {
  const auto bytes = mixed_file();
  for (size_t cut : {size_t{0}, size_t{5}, size_t{8}, size_t{20}, bytes.size() - 1}) {
    SafetensorsReader reader;  // size unknown: the end is checked by finish()
    std::unique_ptr<Recorder> rec;
    reader.push(std::span<const uint8_t>(bytes).first(std::min<size_t>(cut, 8)));
    if (cut > 8) {
      for (size_t at = 8; at < cut; ++at) {
        reader.push(std::span<const uint8_t>(bytes).subspan(at, 1));
        if (reader.has_header() && !rec) {
          rec = std::make_unique<Recorder>(reader.header(), false);
          reader.set_sink(rec.get());
        }
      }
    }
    const std::string m = message_of([&] { reader.finish(); });
    EXPECT_NE(m.find("the file ended after " + std::to_string(cut)), std::string::npos) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  }
  SafetensorsReader reader(bytes.size() + 4);  // a size the header disagrees with
  const std::string m = message_of([&] {
    const size_t taken = reader.push(bytes);
    Recorder sink(reader.header(), true);
    reader.set_sink(&sink);
    reader.push(std::span<const uint8_t>(bytes).subspan(taken));
  });
  EXPECT_NE(m.find("expected no bytes after the last tensor"), std::string::npos) << m;
  SafetensorsReader exact;
  std::unique_ptr<Recorder> rec;
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  const std::string m2 = message_of([&] {
    for (size_t at = 0; at < longer.size(); ++at) {
      exact.push(std::span<const uint8_t>(longer).subspan(at, 1));
      if (exact.has_header() && !rec) {
        rec = std::make_unique<Recorder>(exact.header(), true);
        exact.set_sink(rec.get());
      }
    }
  });
  EXPECT_NE(m2.find("expected no bytes after the last tensor"), std::string::npos) << m2;
}

// Pushes `bytes` into a loader in pieces of `piece` bytes.
template <class M>
std::unique_ptr<M> load_in_pieces(std::span<const uint8_t> bytes, size_t piece, bool known_size) {
  CheckpointLoader<M> loader(known_size ? std::optional<uint64_t>(bytes.size()) : std::nullopt);
  for (size_t at = 0; at < bytes.size(); at += piece)
    loader.push(bytes.subspan(at, std::min(piece, bytes.size() - at)));
  EXPECT_EQ(loader.received(), bytes.size());
  EXPECT_EQ(loader.total(), std::optional<uint64_t>(bytes.size()));
  return loader.finish();
}

TEST(StreamLoad, LoaderBuildsTheModelLoadBuildsWithTheOptimizerState) {
  LanguageModel a(lm_config());
  const std::vector<int32_t> tg(kIds.rbegin(), kIds.rend());
  a.train_step(kIds, tg, 2, 8);
  a.train_step(kIds, tg, 2, 8);
  const auto bytes = a.save(true);
  for (size_t piece : {size_t{1}, size_t{5}, size_t{4096}, bytes.size()})
    for (bool known : {true, false}) {
      const auto b = load_in_pieces<LanguageModel>(bytes, piece, known);
      EXPECT_EQ(b->logits(kIds, 2, 8), a.logits(kIds, 2, 8)) << piece;
      EXPECT_EQ(b->step(), 2);
    }
  // Training continues on the same trajectory as the model saved (its moments came with it).
  const auto b = load_in_pieces<LanguageModel>(bytes, 777, true);
  EXPECT_EQ(b->train_step(kIds, tg, 2, 8), a.train_step(kIds, tg, 2, 8));
  EXPECT_EQ(b->logits(kIds, 2, 8), a.logits(kIds, 2, 8));

  Seq2Seq s({.src_vocab = 7,
             .tgt_vocab = 9,
             .context = 8,
             .d_model = 16,
             .heads = 2,
             .encoder_layers = 1,
             .decoder_layers = 1});
  const auto s2 = load_in_pieces<Seq2Seq>(s.save(false), 3, false);
  const std::vector<int32_t> src = {1, 2, 3, 4}, tgt = {0, 1, 2, 3};
  EXPECT_EQ(s2->logits(src, tgt, 1, 4, 4), s.logits(src, tgt, 1, 4, 4));
  Classifier c({.vocab_size = 7, .context = 8, .d_model = 16, .heads = 2, .layers = 1, .classes = 3});
  const auto c2 = load_in_pieces<Classifier>(c.save(false), 3, true);
  EXPECT_EQ(c2->logits(src, 1, 4), c.logits(src, 1, 4));
}

// A checkpoint with its weights rewritten in another float dtype, the qkv metadata kept (no checksums: they
// were of the F32 bytes).
std::vector<uint8_t> rewritten(const std::vector<uint8_t>& f32, const std::string& dtype) {
  const SafetensorsFile file = parse_safetensors(f32);
  auto meta = file.metadata;
  meta.erase("qkv.crc32");
  std::string header = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : meta) {
    std::string escaped;
    for (char ch : v) {
      if (ch == '"' || ch == '\\') escaped += '\\';
      escaped += ch;
    }
    header += first ? "\"" : ",\"";
    header += k;
    header += "\":\"";
    header += escaped;
    header += '"';
    first = false;
  }
  header += "}";
  std::vector<uint8_t> data;
  for (const auto& t : file.tensors) {
    const auto v = file.floats(t.name);
    const size_t begin = data.size();
    for (float x : v) {
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      if (dtype == "BF16") {
        const uint16_t h = static_cast<uint16_t>(bits >> 16);  // truncation: exact for the values compared below
        data.push_back(static_cast<uint8_t>(h & 0xff));
        data.push_back(static_cast<uint8_t>(h >> 8));
      } else {  // F64
        const double d = x;
        uint8_t b[8];
        std::memcpy(b, &d, 8);
        data.insert(data.end(), b, b + 8);
      }
    }
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += detail::cat(i ? "," : "", t.shape[i]);
    const std::string entry = detail::cat(",\"", t.name, "\":{\"dtype\":\"", dtype, "\",\"shape\":[", shape,
                                          "],\"data_offsets\":[", begin, ",", data.size(), "]}");
    header += entry;
  }
  header += "}";
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

TEST(StreamLoad, HalfAndDoubleWeightsAreConvertedOnTheWay) {
  LanguageModel a(lm_config());
  const auto f32 = a.save(false);
  for (const char* dtype : {"BF16", "F64"}) {
    const auto bytes = rewritten(f32, dtype);
    const auto whole = LanguageModel::load(bytes);  // converted as a whole
    for (size_t piece : {size_t{1}, size_t{3}, size_t{1000}}) {
      const auto b = load_in_pieces<LanguageModel>(bytes, piece, piece == 3);
      EXPECT_EQ(b->logits(kIds, 2, 8), whole->logits(kIds, 2, 8)) << dtype << " piece " << piece;
    }
    if (std::string(dtype) == "F64") {
      EXPECT_EQ(whole->logits(kIds, 2, 8), a.logits(kIds, 2, 8));
    }
  }
}

TEST(StreamLoad, ALoadedModelHoldsItsWeightsOnlyUntilItTrains) {
  LanguageModel a(lm_config());
  const size_t weights = a.num_parameters() * sizeof(float);
  EXPECT_EQ(a.memory().gradients, weights);  // a model made by its constructor: everything up front
  const auto b = LanguageModel::load(a.save(true));
  EXPECT_EQ(b->memory().parameters, weights);
  EXPECT_EQ(b->memory().gradients, weights);  // a checkpoint with its moments: they are restored, so they exist
  EXPECT_EQ(b->memory().optimizer, 2 * weights);
  const auto c = LanguageModel::load(a.save(false));
  EXPECT_EQ(c->memory().parameters, weights);
  EXPECT_EQ(c->memory().gradients, 0u);
  EXPECT_EQ(c->memory().optimizer, 0u);
  EXPECT_EQ(c->logits(kIds, 2, 8), a.logits(kIds, 2, 8));
  // Training makes them, zero, as a fresh optimizer has them: the same step as a model that had them all along.
  const std::vector<int32_t> tg(kIds.rbegin(), kIds.rend());
  LanguageModel fresh(lm_config());  // same config and seed: a's initial weights, which c holds too
  EXPECT_EQ(c->train_step(kIds, tg, 2, 8), fresh.train_step(kIds, tg, 2, 8));
  EXPECT_EQ(c->memory().gradients, weights);
  EXPECT_EQ(c->memory().optimizer, 2 * weights);
  EXPECT_EQ(c->logits(kIds, 2, 8), fresh.logits(kIds, 2, 8));
}

TEST(StreamLoad, LoadFileOfTruncatedCorruptAndForeignFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "qkv_stream_load_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "lm.safetensors").string();
  LanguageModel a(lm_config());
  a.save_file(path, true);
  const auto bytes = a.save(true);
  const auto write = [&](const std::vector<uint8_t>& b) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  EXPECT_EQ(LanguageModel::load_file(path)->logits(kIds, 2, 8), a.logits(kIds, 2, 8));
  write(std::vector<uint8_t>(bytes.begin(), bytes.end() - 5));
  std::string m = message_of([&] { LanguageModel::load_file(path); });
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("data buffer"), std::string::npos) << m;
  auto corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= 0x10;
  write(corrupt);
  m = message_of([&] { LanguageModel::load_file(path); });
  EXPECT_NE(m.find("is corrupt"), std::string::npos) << m;
  write(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 4));
  m = message_of([&] { LanguageModel::load_file(path); });
  EXPECT_NE(m.find("shorter than the 8-byte header length"), std::string::npos) << m;
  // The wrong kind is refused from the header, before any tensor is read.
  m = message_of([&] { Seq2Seq::load_file((dir / "missing.safetensors").string()); });
  EXPECT_NE(m.find("missing.safetensors"), std::string::npos) << m;
  write(bytes);
  m = message_of([&] { Classifier::load_file(path); });
  EXPECT_NE(m.find("the file holds a language_model, expected a classifier"), std::string::npos) << m;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qkv::stream_load_test
