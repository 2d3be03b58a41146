#pragma once
// A LoRA adapter on one Linear role (qkv/lora.h): y[:, n0 : n0 + n] += s * dropout(x) A^T B[n0 : n0 + n]^T,
// s = alpha / rank, A (r, in), B (out, r) in the adapters' own Parameters (models/lora_set.h). Only ops of the op
// boundary (gemm, dropout, add), so every executor runs it.
//
// Forward, per application (rows of x):
//   xd = dropout(x)            (rows, in)   training passes with lora dropout > 0; else xd = x
//   t  = xd A^T                (rows, r)    kept for the backward (one buffer per slot below)
//   y += s t B_n^T             (rows, n)    B_n = rows n0 .. n0 + n of B
// Backward, given dy (rows, n):
//   dB_n += s dy^T t           (n, r)
//   dt    = s dy B_n           (rows, r)
//   dA   += dt^T xd            (r, in)      xd recomputed from x and the same mask
//   dx   += mask(dt A)         (rows, in)   dropout's backward: the kept entries scaled by 1 / (1 - p)
// The row range serves attention's in-projection: "qkv" is one adapter whose B rows 0..C add to q (from the query
// input) and rows C..3C to [k | v] (from the key/value input); "q", "k", "v" each cover their own rows.
//
// An adapter applied to two inputs in one pass (the qkv adapter: query and key/value) keeps one t per input: slot 0
// (the query side, and every other target) and slot 1 (attention's key/value side). Each application draws its
// mask over its own input with the adapter's seed (qkv/lora.h): in self-attention both inputs are the same rows, so
// both masks are the same.
#include <cstdint>

#include "nn/dropout.h"
#include "nn/parameters.h"
#include "nn/saved.h"
#include "qkv/workspace.h"

namespace qkv::nn {

struct LoraAdapter {
  Param* a = nullptr;  // (rank, in)
  Param* b = nullptr;  // (out, rank)
  int in = 0, out = 0, rank = 0;
  float scale = 0.f, p = 0.f;  // alpha / rank; the dropout rate on the input
  uint64_t stream = 0;         // the dropout stream (qkv/lora.h)

  // rows of each slot's input (0: the slot is unused); saved: where each slot's t goes (nn/saved.h: the adapter's
  // own buffers, or a recomputing stack's shared ones, which the layer's re-run forward fills again).
  void plan(Workspace& ws, int rows0, int rows1 = 0, const Saved& saved = {});
  // x (rows, in), its rows ldx apart (a strided x only in passes without dropout: generation's last rows);
  // y's rows ldy apart.
  void forward(ops::Backend& ops, int slot, int n0, int n, const float* x, int ldx, int rows, float* y, int ldy,
               const Dropout& drop);
  // dy's rows lddy apart; x as in the forward (contiguous); dx (rows, in), contiguous, accumulates (+=), or is
  // skipped when null (an input nothing upstream needs the gradient of).
  void backward(ops::Backend& ops, int slot, int n0, int n, const float* dy, int lddy, const float* x, int rows,
                float* dx, const Dropout& drop) {
    backward_params(ops, slot, n0, n, dy, lddy, x, rows, drop);
    if (dx) backward_input(ops, rows, dx, drop);
  }
  // The backward in its two halves: dB, dt and dA (the last read of x), then dx += mask(dt A) from that dt. A layer
  // that writes its input's other gradient over x's buffer runs the first, its product, then the second (nn/linear.h).
  void backward_params(ops::Backend& ops, int slot, int n0, int n, const float* dy, int lddy, const float* x, int rows,
                       const Dropout& drop);
  void backward_input(ops::Backend& ops, int rows, float* dx, const Dropout& drop);

 private:
  bool dropping(const Dropout& drop) const { return drop.train && p > 0.f; }
  // The input with this adapter's mask applied (into xd_), or x itself without dropout.
  const float* dropped(ops::Backend& ops, const float* x, int rows, const Dropout& drop);

  Span t_[2];           // (rows, r) per slot: the forward's xd A^T
  Span xd_, dxd_, dt_;  // shared scratch of one call: (rows, in), (rows, in), (rows, r)
};

}  // namespace qkv::nn
