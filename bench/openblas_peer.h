#pragma once
// OpenBLAS, the peer of the gemm benchmark: an optional, benchmark-only dependency (bench/CMakeLists.txt finds
// it; without it `available()` is false and the tables leave its columns out).
#include <string>

namespace qkv::bench::openblas {

bool available();
// "<openblas_get_config()>; core <name>", or why OpenBLAS is absent.
std::string describe();
void set_num_threads(int n);
// cblas_sgemm, row-major, with the argument order of qkv::kernels::gemm.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);

}  // namespace qkv::bench::openblas
