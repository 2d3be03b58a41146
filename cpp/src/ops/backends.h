#pragma once
// The three executors behind ops::backend(): each defined in its own file, made once by the registry
// (ops/backend.cpp). make_cuda_backend exists in builds with CUDA (exec/cuda/cuda_backend.cpp); without
// it, ops/no_cuda.cpp defines it to throw.
#include <memory>

#include "ops/ops.h"

namespace qkv::ops {

std::unique_ptr<Backend> make_cpu_backend();        // exec/cpu/cpu_backend.cpp
std::unique_ptr<Backend> make_reference_backend();  // exec/reference/reference_backend.cpp
std::unique_ptr<Backend> make_cuda_backend();       // exec/cuda/cuda_backend.cpp, or ops/no_cuda.cpp
// The connected WebGPU executor (exec/webgpu/webgpu_backend.cpp); throws qkv::Error with the reason when none is.
Backend& webgpu_backend();

// Host memory for the two executors whose device is the CPU (cpu and reference, ops/backend.cpp): 64-byte
// aligned and zero-filled; qkv::Error ("out of memory: ...") on failure; 0 bytes gives nullptr.
void* host_allocate(size_t bytes);
void host_free(void* p) noexcept;

}  // namespace qkv::ops
