#pragma once
// The op set: every primitive the layers call. Each op has a forward and a backward side by side in
// kernels/cpu/<op>.cpp. Arguments come in a fixed order: outputs, what the forward saves for the backward,
// inputs, parameters, sizes. Parameter gradients (dw, db, dwte, ...) ACCUMULATE (+=); activation
// gradients are overwritten unless the comment says otherwise.
//
// Dimension legend: B batch, T sequence, C channels (d_model), H heads, hs = C/H, V vocabulary, F d_ff.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ops/types.h"
#include "ops/weight_format.h"
#include "qkv/tensor.h"

namespace qkv::kernels {

// The types the op contract shares with the kernels (ops/types.h).
using ops::Act;
using ops::AdamHyper;
using ops::AdamRange;
using ops::AttentionShape;

// C (M,N) = alpha * op(A) (M,K) * op(B) (K,N) + beta * C, row-major with leading dimensions.
// op(A) = A (M,K) or, with trans_a, A^T where A is (K,M); likewise for B; all four combinations work.
// beta == 0 overwrites C without reading it. C must not overlap A or B. Packed and cache-blocked with a
// register-tiled micro-kernel per instruction set (kernels/cpu/gemm.cpp), threaded over tiles of C.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);
// The naive oracle: three loops, float accumulation, no threads.
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);
// The most floats of op(A) that gemm packs at a time (its row panels in blocks, gemm.cpp): 4 Mi by default. Process-
// wide; tests set it small (>= 1, else qkv::Error) to cross the blocks at small shapes.
int64_t gemm_packed_a_floats();
void set_gemm_packed_a_floats(int64_t floats);
// Likewise the most floats of op(B) that gemm packs at a time (blocks of its columns): 4 Mi by default.
int64_t gemm_packed_b_floats();
void set_gemm_packed_b_floats(int64_t floats);

// reference: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html (eps 1e-5, biased variance)
//   mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + 1e-5), y = (x - mean) * rstd * w + b
// x, y: (rows, C); w, b: (C); mean, rstd: (rows) saved for the backward.
void layernorm_forward(Span y, Span mean, Span rstd, CSpan x, CSpan w, CSpan b, int rows, int C);
// The residual add fused with the LayerNorm that reads its sum, one pass over each row:
//   r = x + f (rows, C), the residual stream, written and kept: it is the LayerNorm's input for the backward;
//   y = LN(r).
// Post-LN sublayers use it for their own norm, LN(x + sublayer(x)); pre-LN stacks for the add that ends one
// sublayer and the norm that starts the next (x + sublayer(LN(x)), then LN of that sum). r may alias x or f;
// y must not alias r.
void residual_layernorm_forward(Span r, Span y, Span mean, Span rstd, CSpan x, CSpan f, CSpan w, CSpan b, int rows,
                                int C);
// With xhat = (x - mean) * rstd and g = dy * w:
//   dx = dr + rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += sum_rows dy * xhat,  db += sum_rows dy.
// dr (rows, C) is the gradient that reaches x along the residual path, added in the same pass: every
// LayerNorm input in the model is a residual stream. dr may alias dx (then dx accumulates), or be empty
// (dx = the LayerNorm's part alone). x is the forward's input (r of residual_layernorm_forward). dw and db
// are summed in fixed blocks of rows, so the result does not depend on the thread count.
void layernorm_backward(Span dx, Span dw, Span db, CSpan dr, CSpan dy, CSpan x, CSpan w, CSpan mean, CSpan rstd,
                        int rows, int C);

// A Linear layer's epilogue, fused into one pass over its output (cuBLASLt's BIAS / GELU_AUX_BIAS forward and
// DGELU_BGRAD backward epilogues):
//   Identity: the bias alone.
//   ReLU: max(h, 0); dy/dh = 1 for h > 0, else 0 (PyTorch's choice at 0).
//     reference: https://pytorch.org/docs/stable/generated/torch.nn.ReLU.html
//   GELU, exact (erf) form: h * Phi(h), Phi(h) = (1 + erf(h / sqrt(2))) / 2;
//     dy/dh = Phi(h) + h * phi(h), phi(h) = exp(-h^2 / 2) / sqrt(2 pi).
//     reference: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html
//   GELUTanh, GELU's tanh approximation (PyTorch's approximate='tanh', GPT-2's gelu_new), u = sqrt(2/pi) (h + k h^3),
//     k = 0.044715: 0.5 h (1 + tanh(u)) = h sigma(2u);  dy/dh = sigma(2u) + h sigma(2u) (1 - sigma(2u)) 2u',
//     u' = sqrt(2/pi) (1 + 3k h^2), sigma the logistic function. Past |h| of about 10, exactly h (h > 0) or 0
//     (h < 0), and dy/dh exactly 1 or 0, as PyTorch's float32 gives; never NaN for finite h.
//     reference: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html
// h, a: (rows, N); b: (N), or empty for no bias.
//   forward:  h += b in place (h is then what the backward needs: the pre-activation), a = act(h).
//             a may alias h for Identity only.
//   backward: dh = da * act'(h), db += sum_rows dh. dh may alias da, and may be empty when only db is wanted
//             (Identity: Linear's bias gradient). db is summed in fixed blocks of rows, whatever the thread count.
void bias_act_forward(Span a, Span h, CSpan b, Act act, int rows, int N);
void bias_act_backward(Span dh, Span db, CSpan da, CSpan h, Act act, int rows, int N);

// Inverted dropout with a counter-based mask: element i is kept when hash(seed, i) >= p * 2^32, and kept
// values are scaled by 1/(1-p). The backward recomputes the mask from (seed, i): nothing is stored.
// y and x may alias; so may dx and dy.
void dropout_forward(Span y, CSpan x, float p, uint64_t seed);
void dropout_backward(Span dx, CSpan dy, float p, uint64_t seed);

// Multi-head scaled dot-product attention (no projections).
// reference: https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html
// q rows (B,Tq) with stride ldq, k and v rows (B,Tk) with stride ldkv; head h uses columns [h*hs, (h+1)*hs).
// Masks (either, both or none): key_pad (B,Tk), nonzero = padding, never attended to; causal: query t
// attends to keys s <= t + q_pos. A query whose keys are all masked gets weights 0, output 0 and gradient 0
// (PyTorch: NaN).
// A KV cache (nn::KvCache) is the reason for the last two fields: its queries are the newest positions, so
// query t sits at key position q_pos + t, and it holds k_rows >= Tk rows per batch of which the first Tk
// are in use. q_pos = 0 and k_rows = 0 (meaning Tk) otherwise.
//   P = softmax(q k^T / sqrt(hs)) per (b, h)      (Tq,Tk), masked entries 0
//   out = dropout(P) v                            (B,Tq,C), stride C; no dropout when p = 0
// Dropout is inverted with a counter-based mask: element (b,h,t,s) is kept when
// dropout_hash(seed, ((b*H + h)*Tq + t)*Tk + s) >= p * 2^32, and kept values are scaled by 1/(1-p).
// The fused kernel (kernels/cpu/attention.cpp, FlashAttention-2's scheme): P is walked in tiles and never
// stored. The forward saves lse (B,H,Tq), the log of each row's softmax normaliser (m + log sum exp(S - m);
// +inf for a row with every key masked), and the backward recomputes P = exp(S - lse) tile by tile; with
// D = rowsum(dout * out) it forms dS = P * (dP - D). Why: memory O(B*H*Tq) instead of O(B*H*Tq*Tk), and
// tiles that stay in cache instead of (B,H,Tq,Tk) matrices written to memory and read back.
// scratch: at least attention_scratch_size(Tq, Tk, hs, 1) floats (enough for any call of at most Tq queries and Tk
// keys); the kernels run as many (b, h) tasks at once as it has room for (up to the thread count), so size it for
// the threads that will run them.
size_t attention_scratch_size(int Tq, int Tk, int hs, int tasks);
void attention_forward(Span out, Span lse, Span scratch, const float* q, const float* k, const float* v,
                       const AttentionShape& s);
// dq (stride ldq), dk and dv (stride ldkv) are overwritten in the heads' columns. out and lse: the forward's.
void attention_backward(float* dq, float* dk, float* dv, Span scratch, CSpan dout, const float* q, const float* k,
                        const float* v, CSpan out, CSpan lse, const AttentionShape& s);

// att (B,H,Tq,Tk) = P, the weights before dropout, computed plainly (inspection and the reference).
void attention_weights(Span att, const float* q, const float* k, const AttentionShape& s);
// The oracle (kernels/cpu/attention_reference.cpp): the same op with P materialised. att (B,H,Tq,Tk) = P;
// with dropout p > 0, att_drop (B,H,Tq,Tk) holds dropout(P). datt: (B,H,Tq,Tk) scratch.
void attention_forward_reference(Span out, Span att, Span att_drop, const float* q, const float* k, const float* v,
                                 const AttentionShape& s);
void attention_backward_reference(float* dq, float* dk, float* dv, Span datt, CSpan dout, const float* q,
                                  const float* k, const float* v, CSpan att, CSpan att_drop, const AttentionShape& s);

// x (B,T,C) = scale * wte[tokens] (V,C) + pos[t] (T_max,C). Token ids must already be validated.
// The backward adds scale * dx into dwte rows and, when dpos is not empty, dx into dpos rows.
void embedding_forward(Span x, const int32_t* tokens, CSpan wte, CSpan pos, float scale, int B, int T, int C);
void embedding_backward(Span dwte, Span dpos, CSpan dx, const int32_t* tokens, float scale, int B, int T, int C);

// The fixed sinusoidal table of "Attention Is All You Need", computed in float32 as the PyTorch tutorials do:
// pe[t, 2i] = sin(t * den_i), pe[t, 2i+1] = cos(t * den_i), den_i = exp(-(2i) * ln(10000) / C). pe: (T,C).
void sinusoidal_positions(Span pe, int T, int C);

// reference: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
// Softmax cross-entropy per row, with label smoothing e: logits: (rows, V); losses: (rows);
//   lse = logsumexp(z), -log p[c] = lse - z[c] (no log(0), no overflow)
//   loss = (1-e) * (lse - z[target]) + e/V * sum_c (lse - z[c])
// Rows whose target equals ignore_index get loss 0 (and gradient 0); the caller excludes them from the mean.
// Targets must lie in [0, V) or equal ignore_index.
void crossentropy_forward(Span losses, CSpan logits, const int32_t* targets, int rows, int V, int ignore_index,
                          float smoothing);
// The loss and its gradient in the same sweep over each row (the training step always wants both, and
// then needs no probabilities buffer and no second pass):
//   dlogits (rows, V) = scale * (softmax(z) - (1-e) * onehot(target) - e/V), 0 on ignored rows.
// scale is the caller's 1/count (times any accumulation weight): count the rows whose target is not
// ignore_index first. dlogits may alias logits (the logits are then consumed).
void crossentropy_forward_backward(Span losses, Span dlogits, CSpan logits, const int32_t* targets, float scale,
                                   int rows, int V, int ignore_index, float smoothing);

// reference: https://pytorch.org/docs/stable/generated/torch.optim.Adam.html and .../torch.optim.AdamW.html
// One Adam(W) step over flat parameter buffers p, m, v, g (all the same length), in torch's scalar order:
//   g' = grad_scale * g                         (torch.nn.utils.clip_grad_norm_'s in-place scaling; g is
//                                                left unscaled here)
//   AdamW (decoupled): p *= 1 - lr * wd          Adam: g' += wd * p (L2 in the gradient)
//   m = b1 m + (1-b1) g',  v = b2 v + (1-b2) g'^2
//   p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)      t: the 1-based step
// Weight decay is per range: each AdamRange [begin, end) of the buffers has its own wd (0 for tensors that
// are not decayed); elements outside every range are left alone. Ranges must be sorted and disjoint.
void adam_step(Span p, Span m, Span v, CSpan g, std::span<const AdamRange> ranges, const AdamHyper& h);
// sum(x^2) in double, for the global gradient norm of clipping. Summed in fixed blocks: the result does not
// depend on the thread count.
double sum_squares(CSpan x);

// ---- Quantized weights (ops/weight_format.h; kernels/cpu/gemm_quant.cpp, embedding_quant.cpp) ----

using ops::WeightFormat;
// C (M,N) = A (M,K) W^T with W (N,K) packed in format f (not F32), scales as weight_format.h lays them out
// (null for F16/BF16). C is overwritten. fp32 arithmetic throughout: the dequantized W's product up to rounding
// order (the row kernels apply int8's row scale to a row's sum and q4's group scales to each block's sum; the
// panels hold dequantize_element's floats exactly). Sizes are the caller's to check (ops/weight_quantize.h:
// check_gemm_quant).
// int8_act (int8 and q4 weights, up to 8 rows of A: decoding): A's rows quantized to int8 in blocks of 32 and
// integer dot products instead, a different numerical contract (kernels/cpu/gemm_quant_dot.h); otherwise ignored.
// epilogue (optional): then a = act(C + b) as bias_act_forward makes it (C keeps C + b where it is the
// pre-activation), a with C's row stride; the row paths apply it to each piece of C as the pool's threads finish it.
struct QuantEpilogue {
  float* a;
  const float* b;  // N floats, or null: no bias
  Act act;
};
void gemm_quant(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W, const float* scales,
                float* C, int ldc, bool int8_act = false, const QuantEpilogue* epilogue = nullptr);
// The naive oracle: three loops, each element dequantized where it is used, float accumulation in k order.
void gemm_quant_reference(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W,
                          const float* scales, float* C, int ldc);
// int8_act's oracle: A quantized (gemm_quant_dot.h: quantize_activations), each block's integer sum, the blocks'
// scaled sums added in order; int8 and q4 weights only.
void gemm_quant_int8_act_reference(int M, int N, int K, const float* A, int lda, WeightFormat f, const uint8_t* W,
                                   const float* scales, float* C, int ldc);
// out (rows, K), row r at out + r * ld_out = W's row r dequantized.
void dequantize_rows(float* out, int ld_out, WeightFormat f, const uint8_t* W, const float* scales, int rows, int K);
// embedding_forward with a packed table: x (B,T,C) = scale * deq(wte[tokens]) + pos[t] (pos may be empty).
void embedding_forward_quant(Span x, const int32_t* tokens, WeightFormat f, const uint8_t* wte, const float* wte_scales,
                             CSpan pos, float scale, int B, int T, int C);

// ---- Data movement and the small ops of the model's edges (kernels/cpu/elementwise.cpp, pool.cpp) ----

// out = a + b over out.size(); out may alias a or b.
void add(Span out, CSpan a, CSpan b);
// Rows of cols floats from src (stride ld_src) to dst (stride ld_dst); the regions must not overlap.
void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols);
// best[r] = the first index of the largest of logits (rows, V) row r.
void argmax_rows(std::span<int32_t> best, CSpan logits, int rows, int V);
// out (B,C) = the mean of x (B,T,C) over the positions t with key_pad[b*T + t] == 0 (0 for a row of only
// padding). The backward writes dx (B,T,C) whole: dout / count at those positions, 0 elsewhere.
void mean_pool_forward(Span out, CSpan x, const uint8_t* key_pad, int B, int T, int C);
void mean_pool_backward(Span dx, CSpan dout, const uint8_t* key_pad, int B, int T, int C);

}  // namespace qkv::kernels
