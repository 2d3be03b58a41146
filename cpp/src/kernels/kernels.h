#pragma once
// The op set: every primitive the layers call. Each op has a forward and a backward side by side in
// kernels/cpu/<op>.cpp. Arguments come in a fixed order: outputs, what the forward saves for the backward,
// inputs, parameters, sizes. Parameter gradients (dw, db, dwte, ...) ACCUMULATE (+=); activation
// gradients are overwritten unless the comment says otherwise.
//
// Dimension legend: B batch, T sequence, C channels (d_model), H heads, hs = C/H, V vocabulary, F d_ff.
#include <cstdint>

#include "qkv/tensor.h"

namespace qkv::kernels {

// C (M,N) = alpha * op(A) (M,K) * op(B) (K,N) + beta * C, row-major with leading dimensions.
// op(A) = A (M,K) or, with trans_a, A^T where A is (K,M); likewise for B. trans_a && trans_b is not
// supported (no layer needs it). Threaded over rows of C; SIMD per the active instruction set.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);
// The naive oracle: three loops, float accumulation, no threads.
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);

// reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html (eps 1e-5, biased variance)
// x, y: (rows, C); mean, rstd: (rows) saved for the backward. dx ACCUMULATES (+=) like the parameters,
// because every LayerNorm input in the model is a residual stream that already holds a gradient.
void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C);
void layernorm_backward(Span dx, Span dw, Span db, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd, int rows, int C);

// reference: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html (exact, erf form)
// y = x * Phi(x), elementwise over n values.
void gelu_forward(Span y, CSpan x);
void gelu_backward(Span dx, CSpan dy, CSpan x);

// Causal multi-head self-attention core (no projections).
// qkv: (B,T,3C) holding q | k | v, head h in columns [h*hs, (h+1)*hs) of each; out: (B,T,C);
// att: (B,H,T,T) softmax(q k^T / sqrt(hs)) with the causal mask (zeros above the diagonal), saved.
// datt: (B,H,T,T) scratch for the backward; dqkv (B,T,3C) is overwritten.
void attention_forward(Span out, Span att, CSpan qkv, int B, int T, int C, int H);
void attention_backward(Span dqkv, Span datt, CSpan dout, CSpan qkv, CSpan att, int B, int T, int C, int H);

// x (B,T,C) = wte[tokens] (V,C) + wpe[t] (T_max,C). Token ids must already be validated.
void embedding_forward(Span x, const int32_t* tokens, CSpan wte, CSpan wpe, int B, int T, int C);
void embedding_backward(Span dwte, Span dwpe, CSpan dx, const int32_t* tokens, int B, int T, int C);

// reference: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
// logits, probs: (rows, V); losses: (rows) = -log softmax(logits)[target]. probs saved for the backward.
// dlogits = scale * (probs - onehot(target)); scale is d(loss)/d(loss_row), 1/rows for a mean.
void crossentropy_forward(Span losses, Span probs, CSpan logits, const int32_t* targets, int rows, int V);
void crossentropy_backward(Span dlogits, CSpan probs, const int32_t* targets, float scale, int rows, int V);

// reference: https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
// One AdamW update of a parameter tensor p with gradient g and moments m, v; t is the 1-based step.
void adamw_step(Span p, Span m, Span v, CSpan g, float lr, float beta1, float beta2, float eps, float weight_decay,
                int t);

}  // namespace qkv::kernels
