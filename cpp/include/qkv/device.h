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

// The arithmetic of the CUDA matrix products, for every model on Device::CUDA in this process (the CPU path is
// fp32 whatever this says; so are parameters, gradients, optimizer state and checkpoints in every mode):
//   FP32 (the default): fp32 products, cuBLAS's default math; the attention kernels' tile products in 3xTF32
//        (fp32 accuracy). The parity reference.
//   TF32: cuBLAS on tensor cores with 10-bit mantissa inputs and fp32 accumulation, one TF32 mma per attention
//        tile product; like torch.backends.cuda.matmul.allow_tf32.
//   BF16: cuBLAS on tensor cores with bf16 inputs (8-bit mantissas, converted from the fp32 operands inside the
//        product) and fp32 accumulation, attention on bf16 tiles (mma m16n8k16). Weights stay fp32 (the master copy the
//        optimizer updates) and activations are stored in fp32: the products run at the bf16 rate, memory traffic is
//        fp32's. The counterpart of PyTorch's bf16 autocast, with its own tolerance against FP32 (about 8x
//        TF32's: 3 fewer mantissa bits).
// set_cuda_precision(anything but FP32) throws qkv::Error naming cuda_unavailable_reason() in a build without
// CUDA; FP32 is then a no-op.
enum class CudaPrecision { FP32, TF32, BF16 };
void set_cuda_precision(CudaPrecision precision);
CudaPrecision cuda_precision();
// "fp32", "tf32", "bf16".
const char* to_string(CudaPrecision precision);
// The inverse of to_string; anything else throws qkv::Error naming `what` (e.g. "--precision"), the value and
// the three names.
CudaPrecision parse_cuda_precision(const std::string& name, const char* what);

// Shorthands: set_cuda_tf32(on) is set_cuda_precision(on ? TF32 : FP32); cuda_tf32() is cuda_precision() == TF32.
void set_cuda_tf32(bool on);
bool cuda_tf32();

// Whether train_step on Device::CUDA runs as one CUDA graph, for every model in this process (on by default, or
// off where the environment has QKV_CUDA_GRAPH=0): per batch shape one step op by op, the next captured, later
// ones replayed (README, "On a GPU"). A step gives the same bits either way; off, every op is its own launch.
// Switch it between steps, and off where several threads use the GPU at once (a capture would take in the other
// threads' work). In a build without CUDA set_cuda_graphs does nothing and cuda_graphs() is false.
void set_cuda_graphs(bool on);
bool cuda_graphs();

}  // namespace qkv
