#pragma once
// What the row-wise kernel files (layernorm, bias_act, crossentropy, adamw) and the per-instruction-set files
// share: each kernel's arguments, the selection table and the row-splitting helper. The SIMD bodies are in
// rowwise_simd.h, instantiated in kernels/cpu/arch/<isa>.cpp; the scalar references are beside each op's
// public entry (kernels/cpu/<op>.cpp) and are the table's last entry, so force_isa("scalar") runs a whole
// model through them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>
#include <xsimd/config/xsimd_arch.hpp>

#include "kernels/kernels.h"
#include "qkv/thread_pool.h"

namespace qkv::kernels {

constexpr float kLayerNormEps = 1e-5f;

// LayerNorm forward over rows [r0, r1). f null: y = LN(x). Otherwise r = x + f is written first, y = LN(r).
struct LayerNormArgs {
  float *y, *mean, *rstd, *r;
  const float *x, *f, *w, *b;
  int C;
};

// LayerNorm backward over rows [r0, r1): dx = dr + LN'(dy) (dr null: dx = LN'(dy)); the rows' dy * xhat and dy
// are added to dw and db, C floats each (the caller's per-block partial sums).
struct LayerNormBackwardArgs {
  float* dx;
  const float *dr, *dy, *x, *w, *mean, *rstd;
  int C;
};

// h += b (b null: no bias), a = act(h), over rows [r0, r1).
struct BiasActArgs {
  float *a, *h;
  const float* b;
  Act act;
  int N;
};

// dh = da * act'(h) over rows [r0, r1) (dh null: not written); the rows' dh are added to db, N floats (the
// caller's per-block partial sums; null: not summed).
struct BiasActBackwardArgs {
  float* dh;
  const float *da, *h;
  Act act;
  int N;
};

// Cross-entropy over rows [r0, r1); dlogits null: loss only.
struct CrossEntropyArgs {
  float *losses, *dlogits;
  const float* logits;
  const int32_t* targets;
  float scale;
  int V, ignore_index;
  float smoothing;
};

// The per-element constants of one Adam(W) step over a range with one weight decay (see adamw.cpp).
struct AdamArgs {
  float grad_scale, l2, shrink, beta1, beta2, step, sqrt_bc2, eps;
};

// One instruction set's row-wise kernels: the selection table's row type.
struct RowwiseKernels {
  void (*layernorm)(const LayerNormArgs&, int r0, int r1);
  void (*layernorm_backward)(const LayerNormBackwardArgs&, int r0, int r1, float* dw, float* db);
  void (*bias_act)(const BiasActArgs&, int r0, int r1);
  void (*bias_act_backward)(const BiasActBackwardArgs&, int r0, int r1, float* db);
  void (*crossentropy)(const CrossEntropyArgs&, int r0, int r1);
  void (*adam)(float* p, float* m, float* v, const float* g, size_t n, const AdamArgs&);
  double (*sum_squares)(const float* x, size_t n);
};

// The table of the active instruction set (kernels/cpu/rowwise.cpp): best first, scalar last.
const RowwiseKernels& rowwise_kernels();

// One instruction set's table, defined in rowwise_simd.h and instantiated in kernels/cpu/arch/<isa>.cpp.
template <class Arch>
const RowwiseKernels& rowwise_kernels_for();
extern template const RowwiseKernels& rowwise_kernels_for<xsimd::avx512f>();
extern template const RowwiseKernels& rowwise_kernels_for<xsimd::fma3<xsimd::avx2>>();
extern template const RowwiseKernels& rowwise_kernels_for<xsimd::sse4_1>();
extern template const RowwiseKernels& rowwise_kernels_for<xsimd::neon64>();

// The scalar references: plain loops, each beside its op's public entry.
void layernorm_rows_reference(const LayerNormArgs& a, int r0, int r1);
void layernorm_backward_rows_reference(const LayerNormBackwardArgs& a, int r0, int r1, float* dw, float* db);
void bias_act_rows_reference(const BiasActArgs& a, int r0, int r1);
void bias_act_backward_rows_reference(const BiasActBackwardArgs& a, int r0, int r1, float* db);
void crossentropy_rows_reference(const CrossEntropyArgs& a, int r0, int r1);
void adam_reference(float* p, float* m, float* v, const float* g, size_t n, const AdamArgs& a);
double sum_squares_reference(const float* x, size_t n);

// Below this many floats a row-wise kernel stays on the calling thread: waking the pool costs more.
constexpr int64_t kParallelMinFloats = 32 * 1024;

// fn(i0, i1) over [0, n) items of `width` floats each: split across the thread pool when the whole is large.
template <class F>
void for_rows(int n, int64_t width, F&& fn) {
  if (n < 2 || static_cast<int64_t>(n) * width < kParallelMinFloats) {
    fn(0, n);
    return;
  }
  parallel_for(n, [&](int64_t i0, int64_t i1) { fn(static_cast<int>(i0), static_cast<int>(i1)); });
}

// Parameter-gradient sums over rows (LayerNorm's dw and db, a bias's db) that do not depend on the thread
// count: the rows go to threads in fixed blocks of kRowBlock; block k adds its rows' terms into its own zeroed
// slot of `slot` floats (body(r0, r1, slot)), and add(slot) then takes the slots in block order.
constexpr int kRowBlock = 32;

template <class Body, class Add>
void sum_in_row_blocks(int rows, int64_t row_floats, size_t slot, Body&& body, Add&& add) {
  const int blocks = (rows + kRowBlock - 1) / kRowBlock;
  thread_local std::vector<float> scratch;  // the calling thread's; grows once, then reused
  scratch.assign(static_cast<size_t>(blocks) * slot, 0.f);
  float* const slots = scratch.data();  // (a lambda naming scratch would see each worker's own)
  for_rows(blocks, kRowBlock * row_floats, [&](int b0, int b1) {
    for (int k = b0; k < b1; ++k)
      body(k * kRowBlock, std::min(rows, (k + 1) * kRowBlock), slots + static_cast<size_t>(k) * slot);
  });
  for (int k = 0; k < blocks; ++k) add(static_cast<const float*>(slots + static_cast<size_t>(k) * slot));
}

}  // namespace qkv::kernels
