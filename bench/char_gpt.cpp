// qkv side of the char-level GPT benchmark (bench/README.md, "Char-level GPT vs PyTorch").
//
// nanoGPT's CPU char recipe on tinyshakespeare, trained from the initial weights that
// bench/char_gpt_torch.py wrote (loaded by name), on the same splitmix64 batches, so the two runs differ only
// in their arithmetic. Run both with bench/run_char_gpt.sh.
//
// usage: qkv_char_gpt DATA INIT.safetensors [STEPS]
// prints: INFO ... lines, TRAIN step loss (every step), VAL step loss, TIME train_s ms_per_step tokens_per_s
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "char_gpt_recipe.h"
#include "qkv/qkv.h"
#include "qkv/safetensors.h"

namespace {

// The recipe (TOOLCHAIN.md, "Data"; char_gpt_recipe.h).
using qkv::bench::kCharBatch, qkv::bench::kCharContext;
constexpr int kBatch = kCharBatch, kContext = kCharContext;
constexpr int kEvalBatches = 200, kEvalEvery = 500;
constexpr uint64_t kTrainSeed = 1, kValSeed = 2;

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

struct Batch {
  std::vector<int32_t> x, y;
};

// (kBatch, kContext) inputs and targets; offsets = splitmix64 % (len(data) - kContext - 1), as the torch side.
Batch make_batch(const std::vector<int32_t>& data, SplitMix64& rng) {
  Batch b;
  b.x.reserve(size_t(kBatch) * kContext);
  b.y.reserve(size_t(kBatch) * kContext);
  for (int i = 0; i < kBatch; ++i) {
    const size_t off = rng.next() % (data.size() - kContext - 1);
    b.x.insert(b.x.end(), data.begin() + off, data.begin() + off + kContext);
    b.y.insert(b.y.end(), data.begin() + off + 1, data.begin() + off + 1 + kContext);
  }
  return b;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DATA INIT.safetensors [STEPS]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 3 ? std::atoi(argv[3]) : qkv::bench::kCharTotalSteps;
  const char* env_threads = std::getenv("CHAR_GPT_THREADS");
  qkv::set_num_threads(env_threads ? std::atoi(env_threads) : 2);
  std::printf("INFO qkv %s  isa %s  threads %d\n", qkv::version(), qkv::active_isa().c_str(), qkv::num_threads());

  // Data: char vocabulary = sorted distinct characters (the file is ASCII, so bytes); 90% / 10% split.
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::set<unsigned char> charset(text.begin(), text.end());
  std::array<int32_t, 256> stoi{};
  int vocab = 0;
  for (unsigned char c : charset) stoi[c] = vocab++;
  std::vector<int32_t> data(text.size());
  for (size_t i = 0; i < text.size(); ++i) data[i] = stoi[static_cast<unsigned char>(text[i])];
  const size_t n = data.size() * 9 / 10;
  const std::vector<int32_t> train(data.begin(), data.begin() + n), val(data.begin() + n, data.end());
  std::printf("INFO chars %zu vocab %d train %zu val %zu\n", data.size(), vocab, train.size(), val.size());

  qkv::LanguageModel lm(qkv::bench::char_gpt_config(vocab), qkv::bench::char_gpt_optimizer());

  // The initial weights, by name; every tensor on either side must be matched.
  const qkv::SafetensorsFile init = qkv::read_safetensors(argv[2]);
  size_t loaded = 0;
  for (const qkv::ParameterView& p : lm.parameters()) {
    const qkv::TensorEntry& t = init.at(p.name);
    if (!std::equal(t.shape.begin(), t.shape.end(), p.shape.begin(), p.shape.end())) {
      std::fprintf(stderr, "%s: shape differs between qkv and the init file\n", p.name);
      return 1;
    }
    const std::vector<float> w = init.floats(p.name);
    std::copy(w.begin(), w.end(), p.value.begin());
    ++loaded;
  }
  if (loaded != init.tensors.size()) {
    std::fprintf(stderr, "the init file has %zu tensors, qkv's model %zu\n", init.tensors.size(), loaded);
    return 1;
  }
  std::printf("INFO parameters %zu; %zu tensors loaded from %s\n", lm.num_parameters(), loaded, argv[2]);

  SplitMix64 val_rng{kValSeed};
  std::vector<Batch> val_batches;
  for (int i = 0; i < kEvalBatches; ++i) val_batches.push_back(make_batch(val, val_rng));
  auto evaluate = [&] {
    lm.set_training(false);
    double sum = 0.0;
    for (const Batch& b : val_batches) sum += lm.evaluate(b.x, b.y, kBatch, kContext).loss;
    lm.set_training(true);
    return sum / val_batches.size();
  };

  SplitMix64 train_rng{kTrainSeed};
  double train_seconds = 0.0;
  for (int step = 0; step <= steps; ++step) {
    if (step % kEvalEvery == 0 || step == steps) std::printf("VAL %d %.6f\n", step, evaluate()), std::fflush(stdout);
    if (step == steps) break;
    const Batch b = make_batch(train, train_rng);
    const auto t0 = std::chrono::steady_clock::now();
    const float loss = lm.train_step(b.x, b.y, kBatch, kContext);
    train_seconds += seconds_since(t0);
    std::printf("TRAIN %d %.6f\n", step + 1, loss);
  }
  std::printf("TIME %.3f %.2f %.0f\n", train_seconds, 1e3 * train_seconds / steps,
              double(kBatch) * kContext * steps / train_seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
