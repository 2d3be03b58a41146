// The two halves of the WebGPU command protocol agree: every opcode and control word of the core's
// cpp/src/exec/webgpu/webgpu_protocol.h has the same number in the GPU worker's web/src/webgpu/protocol.ts.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Control, Op, SUM_SQUARES_BLOCK } from "../../web/src/webgpu/protocol.js";

const header = readFileSync(new URL("../../cpp/src/exec/webgpu/webgpu_protocol.h", import.meta.url), "utf8");

describe("WebGPU protocol", () => {
  it("has the same opcodes on both sides", () => {
    const body = /enum class Op : uint32_t \{([^}]*)\}/.exec(header)![1]!;
    const cpp = Object.fromEntries([...body.matchAll(/(\w+) = (\d+)/g)].map((m) => [m[1]!, Number(m[2])]));
    expect(Object.keys(cpp).length).toBe(29);
    expect(cpp).toEqual({ ...Op });
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
    expect(Number(/kSumSquaresBlock = (\d+)/.exec(header)![1])).toBe(SUM_SQUARES_BLOCK);
  });
});
