// The NCCL communicator (parallel/nccl.h) on one GPU, one rank (QKV_NCCL builds; skipped without a GPU): sums and
// gathers on device memory, and a LanguageModel on the GPU training through dist::DataParallel over NCCL as it
// trains alone. Several ranks: tests/mpi with --device cuda on a machine with GPUs (one per rank: NCCL refuses
// two ranks of one communicator on the same GPU).
#include "parallel/nccl.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "ops/ops.h"
#include "parallel/data_parallel.h"
#include "parallel/loopback.h"
#include "qkv/language_model.h"
#include "runtime/random.h"

namespace qkv::nccl_test {
namespace {

TEST(NcclCommunicator, OneRankSumsAndGathersInPlace) {
  QKV_REQUIRE_CUDA_DEVICE();
  dist::select_local_gpu();
  const auto comm = dist::nccl_world(std::make_unique<test::Loopback>());
  EXPECT_EQ(comm->size(), 1);
  ops::Backend& gpu = ops::backend(Device::CUDA);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i) - 3.f;
  auto* x = static_cast<float*>(gpu.allocate(host.size() * sizeof(float)));
  gpu.upload(x, host.data(), host.size() * sizeof(float));
  const int r = comm->start_sum({x, host.size()});
  comm->wait(r);
  comm->reset();
  const size_t bounds[] = {0, host.size()};
  comm->all_gather({x, host.size()}, bounds);
  std::vector<float> back(host.size());
  gpu.download(back.data(), x, back.size() * sizeof(float));
  EXPECT_EQ(back, host);
  gpu.free(x);
}

TEST(NcclCommunicator, OneRankTrainsAsAlone) {
  QKV_REQUIRE_CUDA_DEVICE();
  dist::select_local_gpu();
  LanguageModelConfig c;
  c.vocab_size = 23;
  c.context = 8;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 2;
  LanguageModel alone(c, {}, Device::CUDA), replica(c, {}, Device::CUDA);
  const auto comm = dist::nccl_world(std::make_unique<test::Loopback>());
  dist::DataParallelOptions o;
  o.bucket_bytes = 4096;
  o.zero1 = true;
  dist::DataParallel dp(*comm, o);
  replica.set_gradient_sync(&dp);
  Rng rng(1);
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> x(16), y(16);
    for (auto& t : x) t = static_cast<int32_t>(rng.next_u64() % 23);
    for (auto& t : y) t = static_cast<int32_t>(rng.next_u64() % 23);
    const float a = alone.train_step(x, y, 2, 8);
    replica.zero_grad();
    const float b = replica.accumulate(x, y, 2, 8);
    replica.apply_gradients();
    EXPECT_EQ(a, b);
  }
  dp.gather_moments();
  EXPECT_EQ(alone.save(), replica.save());
  replica.set_gradient_sync(nullptr);
}

}  // namespace
}  // namespace qkv::nccl_test
