#pragma once
// Which compute devices this build can use. CUDA is compiled in when the build found nvcc (the native
// preset's AUTO mode); cuda_device_count() is 0 when it was not, or when no GPU is present.
#include <string>

namespace qkv {

bool cuda_built();
int cuda_device_count();
// Why CUDA cannot be used here, in one line ("" when a device is present): "CUDA was not built (...)" or
// "no CUDA device: cudaGetDeviceCount returned <name> (<CUDA's description>)". Tests print it when they skip.
std::string cuda_unavailable_reason();
// A one-line description for logs and `--help`, e.g. "cpu (avx512, 2 threads); cuda: not built".
std::string device_summary();

// TF32 in the CUDA matrix products (cuBLAS on tensor cores: 10-bit mantissa inputs, fp32 accumulate) and in the
// attention kernels' tile products (one TF32 mma per product instead of the fp32 default's three), for every
// model on Device::CUDA in this process; off (fp32) by default, like torch.backends.cuda.matmul.allow_tf32.
// set_cuda_tf32(true) throws qkv::Error naming cuda_unavailable_reason() in a build without CUDA;
// set_cuda_tf32(false) is then a no-op. The CPU path is fp32 whatever this says.
void set_cuda_tf32(bool on);
bool cuda_tf32();

}  // namespace qkv
