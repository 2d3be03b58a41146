// The command stream from the C++ core (cpp/src/exec/webgpu/webgpu_backend.cpp) to the GPU worker (gpu-worker.ts).
// cpp/src/exec/webgpu/webgpu_protocol.h is the other half: the opcodes and word layouts below must match it.
//
// Why a stream: the core's model code is synchronous C++ running in the qkv Worker, and WebGPU's readbacks
// are asynchronous (mapAsync). So the GPU belongs to a second worker, which reads the core's commands out of
// a ring in the shared wasm memory and encodes them; the core blocks (Atomics.wait) only where it needs a
// value back (download, the gradient norm), exactly where the CUDA backend synchronises.
//
// A command is words (u32): word 0 = opcode << 16 | the command's length in words (header included), then
// the arguments in the order listed. Kinds of argument:
//   ptr     a byte offset into the GPU arena (one storage buffer; always a multiple of 4)
//   n       an element count (floats or ints)
//   f       a float32, its bits
//   i       an int32, its bits
//   flag    0 or 1
//   host    a byte address in the wasm memory
// An optional span comes as (ptr, n) with n = 0 for "absent". Seeds are u64: (lo, hi).
// Attention shapes are the 15 words SHAPE = B, Tq, Tk, C, H, ldq, ldkv, key_pad(ptr, byte offset of u8 flags),
// has_key_pad, causal, dropout(f), seed_lo, seed_hi, q_pos, k_rows (k_rows resolved: rows per batch in k/v).

export const Op = {
  // ---- handled by the worker itself ----
  Wrap: 0, //              the rest of the ring is unused: continue at word 0
  Capacity: 1, //          bytes: the arena must hold at least this many bytes (grows, keeping contents)
  Upload: 2, //            dst(ptr), bytes, then the bytes themselves (ceil(bytes / 4) words; big uploads come in chunks)
  Download: 3, //          dst(host, lo), dst(host, hi: 0 in wasm32), src(ptr), bytes, ticket
  Sync: 4, //              ticket: reply once all earlier work is done
  Copy: 5, //              dst(ptr), src(ptr), bytes (any multiple of 1; regions do not overlap)
  // ---- kernels (web/src/webgpu/kernels.ts): the ops of cpp/src/ops/ops.h, arguments in its order ----
  Fill: 16, //             x(ptr), n, value(f)
  CopyRows: 17, //         dst(ptr), ld_dst, src(ptr), ld_src, rows, cols            (ld in floats)
  Gemm: 18, //             trans_a, trans_b, M, N, K, alpha(f), A(ptr), lda, B(ptr), ldb, beta(f), C(ptr), ldc
  Add: 19, //              out(ptr), a(ptr), b(ptr), n
  LayerNormForward: 20, // y, mean, rstd, x, w, b (ptrs), rows, C
  ResidualLayerNormForward: 21, // r, y, mean, rstd, x, f, w, b (ptrs), rows, C
  LayerNormBackward: 22, // dx, dw, db, dr(ptr), dr_n, dy, x, w, mean, rstd (ptrs), rows, C, scratch(ptr), scratch_n
  BiasActForward: 23, //   a(ptr), h(ptr), b(ptr), b_n, act (0 identity, 1 relu, 2 gelu, 3 gelu_tanh), rows, N
  BiasActBackward: 24, //  dh(ptr), dh_n, db(ptr), db_n, da(ptr), h(ptr), h_n, act, rows, N, scratch(ptr), scratch_n
  DropoutForward: 25, //   y(ptr), x(ptr), n, p(f), seed_lo, seed_hi
  DropoutBackward: 26, //  dx(ptr), dy(ptr), n, p(f), seed_lo, seed_hi
  AttentionForward: 27, // out, lse, q, k, v (ptrs), SHAPE, scratch(ptr), scratch_n
  AttentionBackward: 28, // dq, dk, dv, dout, q, k, v, out, lse (ptrs), SHAPE, scratch(ptr), scratch_n
  AttentionWeights: 29, // att, q, k (ptrs), SHAPE
  EmbeddingForward: 30, // x(ptr), ids(ptr, int32), wte(ptr), pos(ptr), pos_n, scale(f), B, T, C
  EmbeddingBackward: 31, // dwte(ptr), V, dpos(ptr), dpos_n, dx(ptr), ids(ptr), scale(f), B, T, C, scratch(ptr), scratch_n
  MeanPoolForward: 32, //  out(ptr), x(ptr), key_pad(ptr, u8), B, T, C
  MeanPoolBackward: 33, // dx(ptr), dout(ptr), key_pad(ptr, u8), B, T, C
  CrossEntropyForward: 34, // losses(ptr), logits(ptr), targets(ptr, int32), rows, V, ignore_index(i), smoothing(f)
  CrossEntropyForwardBackward: 35, // losses, dlogits, logits, targets (ptrs), scale(f), rows, V, ignore_index(i), smoothing(f)
  ArgmaxRows: 36, //       best(ptr, int32), logits(ptr), rows, V
  // ranges(ptr): nranges quads (begin u32, end u32, l2 f32, shrink f32), element indices into p/m/v/g; step =
  // lr / (1 - beta1^t) and sqrt_bc2 = sqrt(1 - beta2^t), computed by the core in double as the CPU does. For i
  // in a range: gi = g*grad_scale + l2*p; p *= shrink; m = b1*m + (1-b1)*gi; v = b2*v + (1-b2)*gi*gi;
  // p -= step * (m / (sqrt(v) / sqrt_bc2 + eps)). Elements outside every range are left alone.
  AdamStep: 37, //         p, m, v, g (ptrs), n (the last range's end), ranges(ptr), nranges, beta1(f), beta2(f), eps(f), grad_scale(f), step(f), sqrt_bc2(f)
  // partials[j] = sum of x[i]^2 over block j = [j * 4096, (j+1) * 4096) ∩ [0, n), j < ceil(n / 4096); the core
  // adds the partials in double.
  SumSquares: 38, //       x(ptr), n, partials(ptr)
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

/** Floats per block of SumSquares' partial sums. */
export const SUM_SQUARES_BLOCK = 4096;

/** Words of the control block at the start of the ring region (i32 indices). */
export const Control = {
  Head: 0, //    the ring index the core writes next (0 <= Head < RingWords)
  Tail: 1, //    the ring index the worker reads next; Head == Tail: empty (the core never fills the last word)
  Reply: 2, //   the last ticket answered
  Status: 3, //  0 ok; 1 an error; 2 the device was lost (the message says why; nothing more runs)
  RingWords: 4, // the ring's size in words
  MessageBytes: 5, // the length of the UTF-8 message at word Message
  Message: 16, // 1 KiB for the message of a failure
  Words: 272, // the ring starts after these

} as const;

/** Messages from the qkv Worker to the GPU worker. */
export type GpuRequest =
  | { type: "open" }
  | { type: "start"; memory: WebAssembly.Memory; control: number }
  /** For tests: destroy the device, as a driver reset would (device.lost fires). */
  | { type: "lose" };

/** Messages from the GPU worker to the qkv Worker. */
export type GpuReply =
  | { type: "opened"; adapter: string; fallback: boolean; maxBufferSize: number; maxStorageBufferBindingSize: number }
  | { type: "unavailable"; reason: string }
  | { type: "started" }
  | { type: "lost"; reason: string };
