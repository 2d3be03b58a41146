#pragma once
// The CUDA libraries qkv opens on first use instead of linking them (cuBLAS, cuBLASLt): their static
// initialisation costs about 0.15 s at every process start (gemm.cpp), which every process that never multiplies
// on the GPU would otherwise pay.
#include <string>

namespace qkv::kernels::cuda {

// dlopen of `soname` through the loader's path or, failing that, the toolkit's library folder seen at configure
// time (QKV_CUDA_LIBRARY_DIR); throws qkv::Error naming `op` and the loader's message when neither has it.
void* open_library(const std::string& soname, const char* op);
// The symbol `name` of a library open_library returned; throws qkv::Error naming `op` when it is missing.
void* library_symbol(void* library, const std::string& soname, const char* name, const char* op);

}  // namespace qkv::kernels::cuda
