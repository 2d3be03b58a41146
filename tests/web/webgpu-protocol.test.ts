// The two halves of the WebGPU command protocol agree: the ring's own commands and the control block of the
// core's cpp/src/exec/webgpu/webgpu_protocol.h have the same numbers in the GPU worker's web/src/webgpu/protocol.ts,
// and the kernels' opcodes and words (web/src/webgpu/ops.generated.ts) are what cpp/src/ops/op_list.def, which
// the core compiles, declares today.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Control, Op, SUM_SQUARES_BLOCK } from "../../web/src/webgpu/protocol.js";
import { KernelOp, read, wgslArgs, write } from "../../web/src/webgpu/ops.generated.js";

const header = readFileSync(new URL("../../cpp/src/exec/webgpu/webgpu_protocol.h", import.meta.url), "utf8");
const def = readFileSync(new URL("../../cpp/src/ops/op_list.def", import.meta.url), "utf8");
// The generator is a build script in plain JavaScript (untyped).
const { generate, parse } = (await import(new URL("../../web/scripts/gen-ops.mjs", import.meta.url).href)) as {
  generate: (def: string) => string;
  parse: (def: string) => { ops: { code: string; opcode: number }[] };
};
const generated = readFileSync(new URL("../../web/src/webgpu/ops.generated.ts", import.meta.url), "utf8");

describe("WebGPU protocol", () => {
  it("has the same ring commands on both sides, and the kernels of op_list.def after them", () => {
    const body = /enum class Op : uint32_t \{([^}]*)\}/.exec(header)![1]!;
    const cpp = Object.fromEntries([...body.matchAll(/(\w+) = (\d+),/g)].map((m) => [m[1]!, Number(m[2])]));
    expect(cpp).toEqual({ Wrap: 0, Capacity: 1, Upload: 2, Download: 3, Sync: 4, Copy: 5 });
    expect(body).toContain('#include "ops/op_list.def"');
    const { ops } = parse(def);
    expect(ops.length).toBe(26);
    expect(Object.fromEntries(ops.map((o) => [o.code, o.opcode]))).toEqual({ ...KernelOp });
    expect(Op).toEqual({ ...cpp, ...KernelOp });
    // no opcode twice, and none among the ring's own
    expect(new Set(Object.values(Op)).size).toBe(Object.keys(Op).length);
  });

  it("has ops.generated.ts as op_list.def gives it (node web/scripts/gen-ops.mjs writes it)", () => {
    expect(generate(def)).toBe(generated);
  });

  it("reads and writes each op's words by name, in declaration order", () => {
    // gemm: trans_a, trans_b, M, N, K, alpha (f32), A, lda, B, ldb, beta (f32), C, ldc
    const words = Uint32Array.from([1, 0, 3, 4, 5, 0x3f400000, 64, 7, 128, 8, 0, 256, 9]);
    const g = read.Gemm(words);
    expect(g).toEqual({ trans_a: 1, trans_b: 0, M: 3, N: 4, K: 5, alpha: 0.75, A: 64, lda: 7, B: 128, ldb: 8, beta: 0, C: 256, ldc: 9 });
    expect(write.Gemm(g)).toEqual(words);
    // a signed word and spans (pointer, count)
    const ce = read.CrossEntropyForward(Uint32Array.from([0, 3, 16, 12, 64, 3, 3, 4, 0xffffff9c, 0x3dcccccd]));
    expect(ce.ignore_index).toBe(-100);
    expect(ce.logits_n).toBe(12);
    expect(ce.smoothing).toBeCloseTo(0.1, 7);
    // the worker's words follow the core's in the kernels' struct
    expect(wgslArgs.DropoutForward).toBe(
      "struct Args { y: u32, y_n: u32, x: u32, x_n: u32, p: f32, seed_lo: u32, seed_hi: u32, threshold: u32, factor: f32 }",
    );
  });

  it("has the same control block and block size", () => {
    const word = (name: string) => Number(new RegExp(`${name} = (\\d+)`).exec(header)![1]);
    expect({
      Head: word("kHead"),
      Tail: word("kTail"),
      Reply: word("kReply"),
      Status: word("kStatus"),
      RingWords: word("kRingWords"),
      MessageBytes: word("kMessageBytes"),
      Message: word("kMessage"),
      Words: word("kWords"),
    }).toEqual({ ...Control });
    expect(Number(/QKV_CONST\(SUM_SQUARES_BLOCK, (\d+)\)/.exec(def)![1])).toBe(SUM_SQUARES_BLOCK);
    expect(header).toContain("kSumSquaresBlock = kSUM_SQUARES_BLOCK");
  });
});
