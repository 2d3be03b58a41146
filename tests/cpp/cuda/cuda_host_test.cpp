// The host side of the CUDA backend, which runs on every machine that built it, GPU or not: the error
// messages, the checks that refuse bad input before any launch, the arena's sizing, and (on a machine without a GPU)
// that every op turns the CUDA failure into a qkv::Error naming the op instead of aborting.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "cuda_test_util.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/check.h"
#include "runtime/random.h"
#include "test_util.h"

namespace qkv::cuda_host_test {
namespace {

namespace kc = kernels::cuda;
using test::message_of;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CudaHost, ErrorMessagesNameTheOpTheCallAndCudasWords) {
  const std::string m = kc::cuda_error_message("layernorm_forward", "kernel launch", cudaErrorInvalidConfiguration);
  EXPECT_TRUE(has(m, "layernorm_forward (cuda): kernel launch failed: cudaErrorInvalidConfiguration (")) << m;
  EXPECT_TRUE(has(m, "invalid configuration argument")) << m;
  const std::string b = kc::cublas_error_message("gemm", "cublasSgemm", 7 /* CUBLAS_STATUS_INVALID_VALUE */);
  EXPECT_TRUE(has(b, "gemm (cuda): cublasSgemm failed: CUBLAS_STATUS_INVALID_VALUE")) << b;
  EXPECT_TRUE(has(message_of([] { kc::check_cuda(cudaErrorMemoryAllocation, "adam_step", "cudaMemcpy"); }),
                  "adam_step (cuda): cudaMemcpy failed: cudaErrorMemoryAllocation"));
  EXPECT_NO_THROW(kc::check_cuda(cudaSuccess, "adam_step", "cudaMemcpy"));
}

TEST(CudaHost, UnavailableReasonMatchesTheDeviceCount) {
  const std::string reason = cuda_unavailable_reason();
  if (cuda_device_count() > 0) {
    EXPECT_EQ(reason, "");
  } else {
    EXPECT_EQ(reason.rfind("no CUDA device: ", 0), 0u) << reason;
  }
}

TEST(CudaHost, BadIdsAreRefusedBeforeAnyCopy) {
  const std::vector<int32_t> ids{0, 4, 5, 2};
  // A null destination: the check must fire before anything touches the device.
  const std::string m =
      message_of([&] { kc::upload_ids(nullptr, ids, 5, std::nullopt, "embedding_forward", "tokens"); });
  EXPECT_TRUE(has(m, "embedding_forward: tokens[2] = 5 is out of range: expected 0 <= id < 5")) << m;
  EXPECT_TRUE(
      has(message_of([] { kc::check_ids(std::vector<int32_t>{-1}, 5, std::nullopt, "embedding_forward", "tokens"); }),
          "tokens[0] = -1"));
  // ignore_index is accepted, and named in the message.
  EXPECT_NO_THROW(kc::check_ids(std::vector<int32_t>{0, -100, 4}, 5, -100, "crossentropy", "targets"));
  EXPECT_TRUE(has(message_of([] { kc::check_ids(std::vector<int32_t>{7}, 5, -100, "crossentropy", "targets"); }),
                  "expected 0 <= id < 5 or ignore_index -100"));
}

TEST(CudaHost, ShapesAreRefusedBeforeAnyLaunch) {
  float* fake = reinterpret_cast<float*>(0x100);  // never dereferenced: the checks come first
  kernels::AttentionShape s{1, 4, 4, 2 * 130, 2, 2 * 130, 2 * 130, nullptr, false, 0.f, 0};
  EXPECT_TRUE(has(message_of([&] { kc::attention_forward(fake, fake, fake, fake, fake, s); }),
                  "attention_forward (cuda): head size C/H = 130 is above the CUDA kernel's limit 128"));
  s.C = 9;
  s.ldq = s.ldkv = 9;
  EXPECT_TRUE(has(message_of([&] { kc::attention_weights(fake, fake, fake, s); }), "expected C divisible by H"));
  EXPECT_TRUE(has(message_of([&] { kc::layernorm_forward(fake, fake, fake, fake, fake, fake, 3, 0); }),
                  "layernorm_forward (cuda): C = 0"));
  EXPECT_TRUE(has(message_of([&] { kc::gemm(false, false, 2, 3, 4, 1.f, fake, 3, fake, 3, 0.f, fake, 3); }),
                  "gemm (cuda): lda = 3: expected >= K = 4"));
  EXPECT_TRUE(has(message_of([&] { kc::dropout_forward(fake, fake, 4, 1.5f, 1); }), "dropout_forward (cuda): p = 1.5"));
  const std::vector<kernels::AdamRange> overlapping{{0, 10, 0.1f}, {5, 20, 0.f}};
  EXPECT_TRUE(has(message_of([&] { kc::upload_ranges(nullptr, overlapping, "adam_step"); }), "sorted and disjoint"));
}

TEST(CudaHost, ArenaMeasuresAlignedBuffersWithoutADevice) {
  const size_t bytes = kc::DeviceArena::measure([](kc::DeviceArena& a) {
    EXPECT_EQ(a.take(1), nullptr);  // the counting pass hands out nothing
    a.take(64);                     // exactly 256 bytes
    a.take_ints(65);                // 260 bytes: rounded up to 512
    a.take_doubles(0);
  });
  EXPECT_EQ(bytes, 256u + 256u + 512u + 0u);
  kc::DeviceArena outside;
  EXPECT_TRUE(has(message_of([&] { outside.take(4); }), "outside DeviceArena::plan"));
}

// Without a GPU, each op's first CUDA call fails: every one must say which op it was, as a qkv::Error.
TEST(CudaHost, WithoutADeviceEveryOpRaisesAnErrorNamingIt) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: this checks the path without one";
  float* x = reinterpret_cast<float*>(0x100);  // fake device pointers: no kernel can start without a device
  const int32_t* ids = reinterpret_cast<const int32_t*>(0x100);
  const kernels::AttentionShape s{1, 3, 3, 4, 2, 4, 4, nullptr, true, 0.f, 0};
  const auto names = [&](const char* op, const std::function<void()>& fn) {
    const std::string m = message_of(fn);
    EXPECT_TRUE(has(m, std::string(op) + " (cuda): ") && has(m, " failed: cuda")) << op << ": " << m;
  };
  names("DeviceArena::plan", [] {
    kc::DeviceArena a;
    a.plan([](kc::DeviceArena& w) { w.take(16); });
  });
  names("layernorm_forward", [&] { kc::layernorm_forward(x, x, x, x, x, x, 3, 5); });
  names("residual_layernorm_forward", [&] { kc::residual_layernorm_forward(x, x, x, x, x, x, x, x, 3, 5); });
  names("layernorm_backward", [&] { kc::layernorm_backward(x, x, x, x, x, x, x, x, x, x, 3, 5); });
  names("bias_act_forward", [&] { kc::bias_act_forward(x, x, x, kernels::Act::GELU, 3, 5); });
  names("bias_act_backward", [&] { kc::bias_act_backward(x, x, x, x, x, kernels::Act::ReLU, 3, 5); });
  names("dropout_forward", [&] { kc::dropout_forward(x, x, 8, 0.1f, 1); });
  names("attention_forward", [&] { kc::attention_forward(x, x, x, x, x, s); });
  names("attention_backward", [&] { kc::attention_backward(x, x, x, x, x, x, x, x, x, x, s); });
  names("attention_weights", [&] { kc::attention_weights(x, x, x, s); });
  names("embedding_forward", [&] { kc::embedding_forward(x, ids, x, x, 1.f, 1, 2, 3); });
  names("embedding_backward", [&] { kc::embedding_backward(x, x, x, ids, 5, 1.f, 1, 2, 3, x, 1 << 20); });
  names("crossentropy_forward", [&] { kc::crossentropy_forward(x, x, ids, 2, 5, -100, 0.1f); });
  names("adam_step", [&] {
    kc::adam_step(x, x, x, x, reinterpret_cast<const kernels::AdamRange*>(x), 1, 8,
                  kernels::AdamHyper{1e-3f, 0.9f, 0.999f, 1e-8f, true, 1, 1.f});
  });
  names("sum_squares", [&] { kc::sum_squares(x, 8, reinterpret_cast<double*>(x)); });
  names("upload", [&] { kc::upload(x, std::vector<float>(4, 1.f), "upload"); });
  // gemm's first CUDA call is the cuBLAS handle's creation.
  const std::string g = message_of([&] { kc::gemm(false, false, 2, 2, 2, 1.f, x, 2, x, 2, 0.f, x, 2); });
  EXPECT_TRUE(has(g, "gemm (cuda): cublasCreate failed: CUBLAS_STATUS_")) << g;
}

}  // namespace
}  // namespace qkv::cuda_host_test
