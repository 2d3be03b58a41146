#pragma once
// The CPU's dropout keep decision (kernels/cpu/dropout.h, host and device when nvcc compiles it) under the CUDA
// op set's namespace: the same splitmix64 finaliser of (seed, i) and the same threshold, so that a CUDA dropout
// mask equals the CPU's element for element.
#include "kernels/cpu/dropout.h"

namespace qkv::kernels::cuda {

using qkv::kernels::dropout_hash;
using qkv::kernels::dropout_threshold;

}  // namespace qkv::kernels::cuda
