#pragma once
// The CPU instruction sets qkv's kernels are built for, and which one runs. Native x86-64 builds carry
// AVX-512, AVX2+FMA and SSE4.1 kernels and pick the best the machine has at run time; the WebAssembly
// build carries SSE4.1 kernels, which Emscripten maps onto SIMD128; every build carries scalar kernels.
#include <string>
#include <vector>

namespace qkv {

// Names of the instruction sets available here, best first, "scalar" last.
std::vector<std::string> available_isas();
// The instruction set the kernels use now.
std::string active_isa();
// Forces one instruction set (for tests and benchmarks); throws qkv::Error if it is not available.
void force_isa(const std::string& name);

}  // namespace qkv
