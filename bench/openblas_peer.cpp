// OpenBLAS through its CBLAS interface, or stubs when the build did not find it (QKV_BENCH_OPENBLAS unset).
#include "openblas_peer.h"

#if QKV_BENCH_OPENBLAS
#include <cblas.h>  // OpenBLAS's own cblas.h: it also declares openblas_set_num_threads and friends
#endif

namespace qkv::bench::openblas {

#if QKV_BENCH_OPENBLAS

bool available() { return true; }

std::string describe() { return std::string(openblas_get_config()) + "; core " + openblas_get_corename(); }

void set_num_threads(int n) { openblas_set_num_threads(n); }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

#else

bool available() { return false; }

std::string describe() {
  return "OpenBLAS was not found when this benchmark was configured (install libopenblas-dev and re-run cmake)";
}

void set_num_threads(int) {}

void gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {}

#endif

}  // namespace qkv::bench::openblas
