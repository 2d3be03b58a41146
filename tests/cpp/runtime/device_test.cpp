#include "qkv/device.h"

#include <gtest/gtest.h>

namespace qkv {
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

}  // namespace
}  // namespace qkv
