// The command stream from the C++ core (cpp/src/exec/webgpu/webgpu_backend.cpp) to the GPU worker (gpu-worker.ts).
// cpp/src/exec/webgpu/webgpu_protocol.h is the other half: the ring commands and the control block below must match it.
//
// Why a stream: the core's model code is synchronous C++ running in the qkv Worker, and WebGPU's readbacks
// are asynchronous (mapAsync). So the GPU belongs to a second worker, which reads the core's commands out of
// a ring in the shared wasm memory and encodes them; the core blocks (Atomics.wait) only where it needs a
// value back (download, the gradient norm), exactly where the CUDA backend synchronises.
//
// A command is words (u32): word 0 = opcode << 16 | the command's length in words (header included), then
// its arguments. The ring's own commands are listed here; the kernels' opcodes and words are the op
// declarations of cpp/src/ops/op_list.def (its table gives each kind of argument's words: a pointer is a byte
// offset into the GPU arena, a span a pointer and a count, f32 and i32 their bits, a seed (lo, hi)), from which
// ops.generated.ts is written: KernelOp, and read/write/wgslArgs by name.
import { KernelOp, SUM_SQUARES_BLOCK } from "./ops.generated.js";

export const Op = {
  // ---- handled by the worker itself ----
  Wrap: 0, //              the rest of the ring is unused: continue at word 0
  Capacity: 1, //          bytes: the arena must hold at least this many bytes (grows, keeping contents)
  Upload: 2, //            dst(ptr), bytes, then the bytes themselves (ceil(bytes / 4) words; big uploads come in chunks)
  Download: 3, //          dst(host, lo), dst(host, hi: 0 in wasm32), src(ptr), bytes, ticket
  Sync: 4, //              ticket: reply once all earlier work is done
  Copy: 5, //              dst(ptr), src(ptr), bytes (any multiple of 1; regions do not overlap)
  // ---- kernels (web/src/webgpu/kernels.ts): the ops of cpp/src/ops/op_list.def ----
  ...KernelOp,
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

/** Floats per block of SumSquares' partial sums (op_list.def's SUM_SQUARES_BLOCK). */
export { SUM_SQUARES_BLOCK };

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
