// Loading: a wrong wasmPath fails clearly and can be retried; the single-threaded build also trains in Node.
import { describe, expect, it } from "vitest";
import { CharTokenizer, init, LanguageModel } from "../../web/dist/node.js";
import { EXPECT_RELAXED_SIMD, PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

describe("init", () => {
  it("names the file it could not read and how to fix it, then loads on retry", async () => {
    const wasm = EXPECT_RELAXED_SIMD ? "qkv-relaxed\\.wasm" : "qkv\\.wasm";
    await expect(init({ wasmPath: "/nonexistent/qkv-build" })).rejects.toThrow(
      new RegExp(`cannot read /nonexistent/qkv-build/${wasm}.*init\\(\\{ wasmPath \\}\\)`),
    );
    await expect(init({ threads: 0, threaded: false })).rejects.toThrow(/threads must be a positive integer, got 0/);
    await expect(init({ relaxedSimd: 1 as unknown as boolean })).rejects.toThrow(/relaxedSimd must be a boolean, got 1/);
    if (!EXPECT_RELAXED_SIMD) {
      await expect(init({ relaxedSimd: true })).rejects.toThrow(
        /init\(\{ relaxedSimd: true \}\) needs a WebAssembly engine with relaxed SIMD.*--experimental-wasm-relaxed-simd/,
      );
    }
    await expect(init({ backend: "gpu" as "webgpu" })).rejects.toThrow(/backend must be "webgpu", "wasm" or "auto", got "gpu"/);
    // WebGPU is the browser's: Node refuses it by name, and "auto" runs the wasm core.
    await expect(init({ backend: "webgpu" })).rejects.toThrow(/init\(\{ backend: "webgpu" \}\) needs a browser with WebGPU/);
    // The relaxed-SIMD build wherever the engine has it; the run with the flag (scripts/test.sh) loads it.
    const info = await init({ threaded: false, threads: 4, backend: "auto" });
    expect(info).toMatchObject({ threaded: false, threads: 1, relaxedSimd: EXPECT_RELAXED_SIMD, backend: "wasm" });
    expect(info.fallbackReason).toBeUndefined();
  });

  it("the single-threaded build trains", async () => {
    const tok = await CharTokenizer.fromText(PATTERN_TEXT);
    const data = await tok.encode(PATTERN_TEXT);
    using model = await LanguageModel.create({ vocabSize: tok.size, context: 16, dModel: 32, heads: 4, layers: 1, lr: 1e-2 });
    const random = rng(5);
    const losses: number[] = [];
    for (let i = 0; i < 30; i++) {
      const { inputs, targets } = sampleBatch(data, 4, 16, random);
      losses.push((await model.trainStep(inputs, targets, { batch: 4 })).loss);
    }
    expect(losses.at(-1)!).toBeLessThan(0.75 * losses[0]!);
    await expect(model.trainStep(Int32Array.of(0, 99), Int32Array.of(0, 1))).rejects.toThrow(/inputs\[1\] = 99 is out of range/);
  });
});
