// Data parallel without MPI: the backward's progress signal (nn::Parameters::on_grads_final) and the bucketing
// of dist::DataParallel, in one process. The multi-process behaviour is tests/mpi (ctest Mpi.*).
#include "parallel/data_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/loopback.h"
#include "qkv/classifier.h"
#include "qkv/error.h"
#include "qkv/language_model.h"
#include "qkv/seq2seq.h"
#include "runtime/random.h"

namespace qkv::data_parallel_test {
namespace {

std::vector<int32_t> random_ids(size_t n, int V, uint64_t seed, int low = 0) {
  Rng rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = low + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V - low));
  return ids;
}

// Records, at every progress signal, the gradients it declares final; at reduce() (after the whole backward)
// checks that none of them changed since: the signal is only ever given for gradients that are done.
class Recorder final : public dist::GradientSync {
 public:
  void attach(nn::Parameters& p) override {
    p.on_grads_final([this, &p](size_t offset) {
      const CSpan g = p.grads();
      offsets.push_back(offset);
      snapshots.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(offset), g.end());
    });
  }
  void detach(nn::Parameters& p) override { p.on_grads_final({}); }
  bool reduce(nn::Parameters& p, bool finite_loss) override {
    const CSpan g = p.grads();
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(offsets[i], offsets[i - 1]) << "signals must go from the end of the buffer back";
      }
      EXPECT_EQ(0, std::memcmp(snapshots[i].data(), g.data() + offsets[i], snapshots[i].size() * sizeof(float)))
          << "gradients from offset " << offsets[i] << " changed after they were declared final (signal " << i << ")";
    }
    total = p.count();
    return finite_loss;
  }
  void after_step(nn::Parameters&) override {}

  std::vector<size_t> offsets;
  std::vector<std::vector<float>> snapshots;
  size_t total = 0;
};

TEST(DataParallel, LanguageModelGradsFinalOnlyWhenDone) {
  for (bool tied : {true, false})
    for (NormPosition norm : {NormPosition::Pre, NormPosition::Post}) {
      LanguageModelConfig c;
      c.vocab_size = 23;
      c.context = 8;
      c.d_model = 16;
      c.heads = 2;
      c.layers = 3;
      c.tie_head = tied;
      c.norm = norm;
      LanguageModel lm(c);
      Recorder r;
      lm.set_gradient_sync(&r);
      const auto x = random_ids(3 * 8, 23, 1), y = random_ids(3 * 8, 23, 2);
      lm.zero_grad();
      lm.accumulate(x, y, 3, 8);
      lm.apply_gradients();
      EXPECT_EQ(r.offsets.size(), 4u) << "a signal per layer and one for the final norm";
      EXPECT_GT(r.total, 0u);
      lm.set_gradient_sync(nullptr);
    }
}

TEST(DataParallel, Seq2SeqAndClassifierGradsFinalOnlyWhenDone) {
  Seq2SeqConfig s;
  s.src_vocab = 19;
  s.tgt_vocab = 17;
  s.context = 9;
  s.d_model = 16;
  s.heads = 2;
  s.encoder_layers = 2;
  s.decoder_layers = 2;
  Seq2Seq m(s);
  Recorder r;
  m.set_gradient_sync(&r);
  const auto src = random_ids(2 * 7, 19, 3, 1), tin = random_ids(2 * 5, 17, 4, 1), tout = random_ids(2 * 5, 17, 5, 1);
  m.zero_grad();
  m.accumulate(src, tin, tout, 2, 7, 5);
  m.apply_gradients();
  EXPECT_EQ(r.offsets.size(), 6u);

  for (ClassifierHead head : {ClassifierHead::Linear, ClassifierHead::MLP}) {
    ClassifierConfig c;
    c.vocab_size = 21;
    c.context = 6;
    c.d_model = 16;
    c.heads = 2;
    c.layers = 2;
    c.classes = 3;
    c.head = head;
    Classifier k(c);
    Recorder rc;
    k.set_gradient_sync(&rc);
    const auto tokens = random_ids(4 * 6, 21, 6, 1), labels = random_ids(4, 3, 7);
    k.zero_grad();
    k.accumulate(tokens, labels, 4, 6);
    k.apply_gradients();
    EXPECT_EQ(rc.offsets.size(), 3u);
  }
}

using test::Loopback;

TEST(DataParallel, BucketsStartInOrderDuringTheBackward) {
  LanguageModelConfig c;
  c.vocab_size = 23;
  c.context = 8;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 4;
  LanguageModel lm(c);
  Loopback comm;
  dist::DataParallelOptions o;
  o.bucket_bytes = 8 * 1024;
  dist::DataParallel dp(comm, o);
  lm.set_gradient_sync(&dp);
  const auto x = random_ids(2 * 8, 23, 1), y = random_ids(2 * 8, 23, 2);
  size_t during = 0;
  {
    // Count the reductions started before apply_gradients: the backward's.
    lm.zero_grad();
    lm.accumulate(x, y, 2, 8);
    during = comm.started.size();
    lm.apply_gradients();
  }
  ASSERT_EQ(comm.started.size(), dp.buckets());
  EXPECT_GT(dp.buckets(), 4u);
  EXPECT_GT(during, dp.buckets() / 2) << "most buckets start during the backward (overlap)";
  EXPECT_LT(during, dp.buckets()) << "the embedding's bucket waits for the end of the backward";
  // From the end of the buffer back, contiguous, covering it all.
  for (size_t k = 1; k < comm.started.size(); ++k)
    EXPECT_EQ(comm.started[k].first + comm.started[k].second, comm.started[k - 1].first);
  EXPECT_EQ(dp.stats().steps, 1);

  // A second backward before the step would add to buckets already being summed: refused.
  lm.zero_grad();
  lm.accumulate(x, y, 2, 8);
  EXPECT_THROW(lm.accumulate(x, y, 2, 8), Error);
  lm.set_gradient_sync(nullptr);
}

TEST(DataParallel, OneRankTrainsAsAlone) {
  LanguageModelConfig c;
  c.vocab_size = 23;
  c.context = 8;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  LanguageModel alone(c), replica(c);
  Loopback comm;
  dist::DataParallel dp(comm);
  replica.set_gradient_sync(&dp);
  for (int step = 0; step < 3; ++step) {
    const auto x = random_ids(2 * 8, 23, 10 + step), y = random_ids(2 * 8, 23, 20 + step);
    const float a = alone.train_step(x, y, 2, 8);
    replica.zero_grad();
    const float b = replica.accumulate(x, y, 2, 8);
    replica.apply_gradients();
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(alone.save(), replica.save());
  replica.set_gradient_sync(nullptr);
}

// With LoRA adapters only the adapters' gradients are summed (the frozen base has none): every sum started lies in
// the adapters' gradient buffer and together they cover it once; the replica trains as a model alone does, bit for
// bit, and its base does not move.
TEST(DataParallel, LoraReducesOnlyTheAdaptersGradients) {
  LanguageModelConfig c;
  c.vocab_size = 23;
  c.context = 8;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.dropout = 0.1f;
  LoraOptions o;
  o.rank = 4;
  o.dropout = 0.1f;
  o.targets = {"qkv", "out", "up", "down", "head"};
  LanguageModel alone(c), replica(c);
  alone.add_lora(o);
  Loopback comm;
  dist::DataParallelOptions options;
  options.bucket_bytes = 1024;  // several buckets
  dist::DataParallel dp(comm, options);
  replica.set_gradient_sync(&dp);
  replica.add_lora(o);  // the group moves to the adapters
  const auto base = replica.parameters();
  std::vector<std::vector<float>> base_values;
  for (const auto& p : base) base_values.emplace_back(p.value.begin(), p.value.end());
  for (int step = 0; step < 3; ++step) {
    const auto x = random_ids(2 * 8, 23, 10 + step), y = random_ids(2 * 8, 23, 20 + step);
    const float a = alone.train_step(x, y, 2, 8);
    comm.started.clear();
    replica.zero_grad();
    const float b = replica.accumulate(x, y, 2, 8);
    replica.apply_gradients();
    EXPECT_EQ(a, b);
    // The adapters' gradients are one flat buffer: from the first adapter's gradient to the end of the last.
    const auto views = replica.lora_parameters();
    const float* begin = views.front().grad.data();
    const float* end = views.back().grad.data() + views.back().grad.size();
    size_t floats = 0;
    for (const auto& [at, n] : comm.started) {
      EXPECT_GE(at, begin);
      EXPECT_LE(at + n, end + 15);  // the last tensor's 64-byte padding
      floats += n;
    }
    EXPECT_GE(floats, static_cast<size_t>(end - begin));
    EXPECT_LE(floats, static_cast<size_t>(end - begin) + 15);
  }
  const auto va = alone.lora_parameters(), vb = replica.lora_parameters();
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(va[i].value.data(), vb[i].value.data(), va[i].value.size_bytes())) << va[i].name;
    EXPECT_EQ(0, std::memcmp(va[i].m.data(), vb[i].m.data(), va[i].m.size_bytes())) << va[i].name;
  }
  for (size_t i = 0; i < base.size(); ++i)
    EXPECT_EQ(0, std::memcmp(base[i].value.data(), base_values[i].data(), base[i].value.size_bytes())) << base[i].name;
  // Back to training the base whole: the group follows.
  replica.remove_lora();
  comm.started.clear();
  const auto x = random_ids(2 * 8, 23, 30), y = random_ids(2 * 8, 23, 31);
  replica.zero_grad();
  replica.accumulate(x, y, 2, 8);
  replica.apply_gradients();
  size_t floats = 0;
  for (const auto& [at, n] : comm.started) floats += n;
  size_t base_floats = 0;
  for (const auto& p : replica.parameters()) base_floats += (p.value.size() + 15) / 16 * 16;
  EXPECT_EQ(floats, base_floats);
  replica.set_gradient_sync(nullptr);
}

}  // namespace
}  // namespace qkv::data_parallel_test
