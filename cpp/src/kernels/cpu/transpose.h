#pragma once
// The transposing copy that gemm's packing uses (defined in gemm.cpp), shared with the attention kernel,
// which transposes its key and value blocks with it.

namespace qkv::kernels {

// dst[k * R + r] = src[r * ld + k] for k in [0, K), r in [0, R), zero for r >= rows: R rows of a row-major
// matrix (rows <= R of them real) become one k-major panel, R floats per k.
void pack_transposed(float* dst, int R, const float* src, int ld, int rows, int K);

}  // namespace qkv::kernels
