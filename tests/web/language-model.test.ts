// The npm package in Node against the real threaded .wasm: load, train, generate, and bad input.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, init, LanguageModel, VERSION, type RuntimeInfo } from "../../web/dist/node.js";
import { PATTERN, PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

const tok = CharTokenizer.fromText(PATTERN_TEXT);
const data = tok.encode(PATTERN_TEXT);
const BATCH = 4;
const SEQ = 16;
const CONFIG = { vocabSize: tok.size, context: SEQ, dModel: 32, heads: 4, layers: 1, lr: 1e-2, seed: 7 };

let info: RuntimeInfo;
let model: LanguageModel;
const random = rng(42);

beforeAll(async () => {
  info = await init({ threads: 2 });
  model = await LanguageModel.create(CONFIG);
});
afterAll(() => model?.dispose());

/** One training step on a fresh random batch; the model must still train after whatever came before. */
async function stepWorks(m: LanguageModel = model): Promise<void> {
  const { inputs, targets } = sampleBatch(data, BATCH, SEQ, random);
  const { loss } = await m.trainStep(inputs, targets, { batch: BATCH, seq: SEQ });
  expect(Number.isFinite(loss)).toBe(true);
  expect(loss).toBeGreaterThan(0);
}

describe("init", () => {
  it("loads the threaded build with the requested threads and reports SIMD and version", () => {
    expect(info.threaded).toBe(true);
    expect(info.threads).toBe(2);
    expect(typeof info.simd).toBe("string");
    expect(info.simd.length).toBeGreaterThan(0);
    expect(info.version).toBe(VERSION);
    expect(VERSION).toBe(pkg.version);
  });

  it("returns the first load's result when called again", async () => {
    expect(await init({ threads: 1 })).toEqual(info);
  });
});

describe("LanguageModel", () => {
  it("counts its parameters", () => {
    // Embedding V*C + positions T*C + the final LayerNorm and head at least: a lower bound independent of biases.
    const { vocabSize: V, context: T, dModel: C } = CONFIG;
    expect(model.numParameters()).toBeGreaterThan(V * C + T * C + 12 * C * C);
    expect(model.config.dModel).toBe(32);
  });

  it("learns a repeating sentence: the loss falls below half its first value in 50 steps", async () => {
    const m = await LanguageModel.create({ ...CONFIG, seed: 11 });
    const train = rng(1);
    const losses: number[] = [];
    for (let step = 0; step < 50; step++) {
      const { inputs, targets } = sampleBatch(data, BATCH, SEQ, train);
      losses.push((await m.trainStep(inputs, targets, { batch: BATCH, seq: SEQ })).loss);
    }
    const first = losses[0]!;
    const last5 = losses.slice(-5).reduce((a, b) => a + b, 0) / 5;
    console.log(`loss: step 0 ${first.toFixed(3)}, mean of steps 45-49 ${last5.toFixed(3)} (ln V = ${Math.log(tok.size).toFixed(3)})`);
    // A fresh model predicts close to uniform: loss near ln(vocabSize).
    expect(Math.abs(first - Math.log(tok.size))).toBeLessThan(0.5);
    expect(last5).toBeLessThan(0.5 * first);

    // evaluate() gives a loss without training: the same batch twice gives the same loss.
    const { inputs, targets } = sampleBatch(data, BATCH, SEQ, train);
    const a = await m.evaluate(inputs, targets, { batch: BATCH, seq: SEQ });
    const b = await m.evaluate(inputs, targets, { batch: BATCH, seq: SEQ });
    expect(a.loss).toBe(b.loss);
    expect(a.loss).toBeLessThan(0.5 * first);
    m.dispose();
  });

  it("setLearningRate changes the step size: ~0 leaves the loss as it was, a large one lowers it", async () => {
    const m = await LanguageModel.create({ ...CONFIG, seed: 12, weightDecay: 0 });
    const { inputs, targets } = sampleBatch(data, BATCH, SEQ, rng(9));
    const before = (await m.evaluate(inputs, targets, { batch: BATCH })).loss;
    await m.setLearningRate(1e-12);
    await m.trainStep(inputs, targets, { batch: BATCH });
    const tiny = (await m.evaluate(inputs, targets, { batch: BATCH })).loss;
    expect(Math.abs(tiny - before)).toBeLessThan(1e-4);
    await m.setLearningRate(1e-2);
    for (let i = 0; i < 3; i++) await m.trainStep(inputs, targets, { batch: BATCH });
    const after = (await m.evaluate(inputs, targets, { batch: BATCH })).loss;
    expect(after).toBeLessThan(before - 0.1);
    await expect(m.setLearningRate(-1)).rejects.toThrow(/lr must be a finite number > 0, got -1/);
    if (typeof Symbol.dispose === "symbol") {
      m[Symbol.dispose]();
      expect(m.disposed).toBe(true);
    } else {
      m.dispose();
    }
  });

  it("derives the batch shape from the array length", async () => {
    const { inputs, targets } = sampleBatch(data, 2, SEQ, random);
    const a = await model.evaluate(inputs, targets, { batch: 2 });
    const b = await model.evaluate(inputs, targets, { seq: SEQ });
    expect(a.loss).toBe(b.loss);
  });

  it("generates exactly maxTokens ids in range, reproducibly for a seed", async () => {
    const prompt = tok.encode("the quick ");
    const a = await model.generate(prompt, { maxTokens: 20, temperature: 0.8, seed: 3 });
    expect(a).toBeInstanceOf(Int32Array);
    expect(a.length).toBe(20);
    for (const id of a) expect(id >= 0 && id < tok.size).toBe(true);
    expect(await model.generate(prompt, { maxTokens: 20, temperature: 0.8, seed: 3 })).toEqual(a);
    expect(typeof tok.decode(a)).toBe("string");
  });
});

describe("bad input rejects with an Error naming the argument, and the model stays usable", () => {
  const good = () => sampleBatch(data, BATCH, SEQ, random);
  const shape = { batch: BATCH, seq: SEQ };

  async function rejects(p: Promise<unknown>, message: RegExp): Promise<void> {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err, `expected a rejection matching ${message}`).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(message);
    await stepWorks();
  }

  it("wrong types", async () => {
    const { inputs, targets } = good();
    await rejects(model.trainStep("abc" as unknown as Int32Array, targets, shape), /inputs must be an Int32Array.*"abc"/);
    await rejects(model.trainStep(inputs, [1, 2, 3] as unknown as Int32Array, shape), /targets must be an Int32Array.*Array/);
    await rejects(model.trainStep(new Float32Array(inputs) as unknown as Int32Array, targets, shape), /inputs must be an Int32Array.*Float32Array/);
    await rejects(model.trainStep(inputs, targets, { batch: "4" as unknown as number, seq: SEQ }), /batch must be a positive integer.*"4"/);
    await rejects(model.generate("ab" as unknown as Int32Array, { maxTokens: 3 }), /prompt must be an Int32Array/);
    await rejects(model.generate(tok.encode("a"), { maxTokens: 2.5 }), /options.maxTokens must be a positive integer.*2.5/);
    await rejects(model.generate(tok.encode("a"), { maxTokens: 2, temperature: Number.NaN }), /options.temperature must be a finite number >= 0.*NaN/);
    await rejects(LanguageModel.create({ ...CONFIG, vocabSize: "65" as unknown as number }), /config.vocabSize must be a positive integer.*"65"/);
    await rejects(LanguageModel.create({ ...CONFIG, dModle: 8 } as unknown as typeof CONFIG), /config.dModle is not a LanguageModel option/);
  });

  it("token ids out of range (checked by the core)", async () => {
    const { inputs, targets } = good();
    inputs[3] = 99;
    await rejects(model.trainStep(inputs, targets, shape), /inputs\[3\] = 99 is out of range.*\[0, \d+\)/);
    const t2 = targets.slice();
    t2[5] = -1;
    await rejects(model.trainStep(good().inputs, t2, shape), /targets\[5\] = -1 is out of range/);
    await rejects(model.evaluate(inputs, targets, shape), /inputs\[3\] = 99 is out of range/);
    await rejects(model.generate(Int32Array.of(1, tok.size), { maxTokens: 2 }), /prompt\[1\] = \d+ is out of range/);
  });

  it("zero and mismatched sizes", async () => {
    const { inputs, targets } = good();
    await rejects(model.trainStep(inputs, targets, { batch: 0, seq: SEQ }), /batch must be a positive integer.*0/);
    await rejects(model.trainStep(inputs, targets, { batch: BATCH, seq: 0 }), /seq must be a positive integer.*0/);
    await rejects(model.trainStep(new Int32Array(0), new Int32Array(0)), /inputs must not be empty/);
    await rejects(model.trainStep(inputs, targets.subarray(1), shape), /targets.length must equal inputs.length/);
    await rejects(model.trainStep(inputs, targets, { batch: 3, seq: SEQ }), /inputs.length must be batch \* seq = 3 \* 16 = 48, got 64/);
    // A sequence longer than the context: the core's check.
    const long = sampleBatch(data, 1, 2 * SEQ, random);
    await rejects(model.trainStep(long.inputs, long.targets, { batch: 1, seq: 2 * SEQ }), /seq|context/);
    await rejects(LanguageModel.create({ ...CONFIG, dModel: 0 }), /config.dModel must be a positive integer.*0/);
    await rejects(LanguageModel.create({ ...CONFIG, layers: -1 }), /config.layers must be a positive integer/);
  });

  it("dModel not divisible by heads (checked by the core)", async () => {
    await rejects(LanguageModel.create({ ...CONFIG, dModel: 30, heads: 4 }), /(dModel|d_model).*30.*heads|heads.*(dModel|d_model)/i);
  });

  it("a disposed model", async () => {
    const m = await LanguageModel.create(CONFIG);
    const { inputs, targets } = good();
    await m.trainStep(inputs, targets, shape);
    m.dispose();
    m.dispose(); // twice is harmless
    expect(m.disposed).toBe(true);
    await rejects(m.trainStep(inputs, targets, shape), /LanguageModel.trainStep\(\) was called after dispose\(\)/);
    await rejects(m.generate(tok.encode("a"), { maxTokens: 1 }), /generate\(\) was called after dispose\(\)/);
    expect(() => m.numParameters()).toThrow(/after dispose/);
  });
});

describe("CharTokenizer", () => {
  it("round-trips text and names unknown characters", () => {
    expect(tok.decode(tok.encode(PATTERN))).toBe(PATTERN);
    expect(tok.size).toBe(new Set(PATTERN).size);
    expect(() => tok.encode("the QUICK")).toThrow(/text\[4\] = "Q" \(U\+0051\) is not in the tokenizer's vocabulary/);
    expect(() => tok.decode([0, tok.size])).toThrow(/ids\[1\] = \d+ is out of range/);
  });
});
