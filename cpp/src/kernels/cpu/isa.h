#pragma once
// The selection table: which instruction set's kernels run. Kernel files ask for the active Isa and
// pick their function from a small switch; layers never see this.
namespace qkv::kernels {

enum class Isa { AVX512, AVX2, SSE41, NEON, Scalar };

Isa active_isa();

}  // namespace qkv::kernels
