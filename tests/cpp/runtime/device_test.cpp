#include "qkv/device.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace qkv::device_test {
namespace {

TEST(Device, SummaryNamesTheCpuPath) {
  const std::string s = device_summary();
  EXPECT_EQ(s.rfind("cpu (", 0), 0u) << s;
  EXPECT_NE(s.find(cuda_built() ? "device(s)" : "not built"), std::string::npos) << s;
}

TEST(Device, CudaDevicesAreReported) {
  if (!cuda_built()) GTEST_SKIP() << "CUDA was not built (nvcc not found at configure time)";
  const int n = cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no CUDA device present (cudaGetDeviceCount reports none); CUDA tests skipped";
  EXPECT_NE(device_summary().find("cuda: " + std::to_string(n) + " device(s)"), std::string::npos);
}

// The step graph's switch: on by default where CUDA is built (unless the environment turned it off), off and on
// again through the API; a build without CUDA has none to turn on.
TEST(Device, TheCudaGraphSwitch) {
  const bool before = cuda_graphs();
  if (!cuda_built()) {
    EXPECT_FALSE(before);
    set_cuda_graphs(true);
    EXPECT_FALSE(cuda_graphs());
    return;
  }
  const char* env = std::getenv("QKV_CUDA_GRAPH");
  EXPECT_EQ(before, !(env && std::string(env) == "0"));
  set_cuda_graphs(false);
  EXPECT_FALSE(cuda_graphs());
  set_cuda_graphs(true);
  EXPECT_TRUE(cuda_graphs());
  set_cuda_graphs(before);
}

}  // namespace
}  // namespace qkv::device_test
