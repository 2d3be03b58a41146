// The same core on two targets: the WebAssembly build (through the npm package) must follow the native
// build's loss trajectory for the same config, weights seed and batch. build/native/native-trace.json is
// written by the native tool qkv_lm_trace (scripts/test.sh runs it). Native kernels use FMA and SIMD128
// has none, so the values agree to float32 rounding accumulated over 20 steps, not bit for bit.
import { existsSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { init, LanguageModel } from "../../web/dist/node.js";

interface Trace {
  config: { vocabSize: number; context: number; dModel: number; heads: number; layers: number; dFF: number; seed: number; lr: number };
  batch: number;
  seq: number;
  inputs: number[];
  targets: number[];
  losses: number[];
  prompt: number[];
  greedy: number[];
}

const tracePath = new URL("../../build/native/native-trace.json", import.meta.url);
let trace: Trace;
let model: LanguageModel;

beforeAll(async () => {
  if (!existsSync(tracePath)) {
    throw new Error(
      "build/native/native-trace.json is missing: run ./build/native/tests/cpp/qkv_lm_trace > build/native/native-trace.json",
    );
  }
  trace = JSON.parse(readFileSync(tracePath, "utf8")) as Trace;
  await init({ threads: 2 });
  model = await LanguageModel.create(trace.config);
});
afterAll(() => model?.dispose());

describe("wasm vs native", () => {
  it("follows the native loss trajectory over 20 AdamW steps (relative difference < 1e-4)", async () => {
    const inputs = Int32Array.from(trace.inputs);
    const targets = Int32Array.from(trace.targets);
    const losses: number[] = [];
    for (let s = 0; s < trace.losses.length; s++) {
      losses.push((await model.trainStep(inputs, targets, { batch: trace.batch, seq: trace.seq })).loss);
    }
    const worst = Math.max(...losses.map((l, i) => Math.abs(l - trace.losses[i]) / Math.abs(trace.losses[i])));
    expect(worst, `wasm ${losses.join(", ")}\nnative ${trace.losses.join(", ")}`).toBeLessThan(1e-4);
    // And the trajectory is a real one: it fell.
    expect(trace.losses[trace.losses.length - 1]).toBeLessThan(trace.losses[0] - 0.5);
  });

  it("generates the same greedy continuation after training", async () => {
    const out = await model.generate(Int32Array.from(trace.prompt), { maxTokens: trace.greedy.length, temperature: 0 });
    expect(Array.from(out)).toEqual(trace.greedy);
  });
});
