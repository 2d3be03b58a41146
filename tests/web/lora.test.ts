// LoRA in the npm package (the wasm core): adapters on a trained char language model fine-tune it on another text
// while the base stays bit for bit what it was, merging gives the adapters' outputs, a quantized (int8) base trains
// its adapters, an adapter saved alone loads onto a fresh model and gives the same outputs, memory() counts gradients
// and Adam moments for the adapters only, and every refusal is an Error naming what is wrong.
import { beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, init, LanguageModel, type LoraOptions } from "../../web/dist/node.js";
import { PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

await init({ threads: 2 });
const NO_SPECIALS = { specials: { pad: false, bos: false, eos: false, unk: false } };
const tok = await CharTokenizer.fromText(PATTERN_TEXT, NO_SPECIALS);
const data = await tok.encode(PATTERN_TEXT);
// The fine-tuning text: the same letters (a pangram's) in another order, which the base has never seen.
const TUNE_TEXT = "a lazy dog jumps over the quick brown fox. ".repeat(40);
const tune = await tok.encode(TUNE_TEXT);
const C = 32;
const F = 4 * C; // dFF's default: 4 dModel
const LAYERS = 2;
const CONFIG = { vocabSize: tok.size, context: 16, dModel: C, heads: 4, layers: LAYERS, lr: 1e-2, seed: 5 };
const PROMPT = Int32Array.from(tune.slice(0, 16));
const SHAPE = { batch: 1, seq: 16 };

let trained: Uint8Array; // the base: trained on PATTERN_TEXT, saved without its optimizer state

beforeAll(async () => {
  const m = await LanguageModel.create(CONFIG);
  const random = rng(3);
  for (let i = 0; i < 40; i++) {
    const { inputs, targets } = sampleBatch(data, 4, 16, random);
    await m.trainStep(inputs, targets, { batch: 4, seq: 16 });
  }
  trained = await m.save({ optimizer: false });
  m.dispose();
});

/** The F32 tensors of a safetensors file by name (the checkpoint's own parser is the core's; this one is the test's). */
function tensors(file: Uint8Array): Map<string, Float32Array> {
  const n = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const out = new Map<string, Float32Array>();
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__" || t.dtype !== "F32") continue;
    const [a, b] = t.data_offsets;
    out.set(name, new Float32Array(file.slice(8 + n + a, 8 + n + b).buffer));
  }
  return out;
}

/** `steps` AdamW steps on the fine-tuning text (batches of 4 × 16), returning each step's loss. */
async function fineTune(m: LanguageModel, steps: number, seed = 7): Promise<number[]> {
  const random = rng(seed);
  const losses: number[] = [];
  for (let i = 0; i < steps; i++) {
    const { inputs, targets } = sampleBatch(tune, 4, 16, random);
    losses.push((await m.trainStep(inputs, targets, { batch: 4, seq: 16 })).loss);
  }
  return losses;
}

/** The floats of adapters of rank r on `targets` of this model: A (r, in) and B (out, r) per adapted Linear. */
function adapterFloats(r: number, targets: string[]): number {
  const per: Record<string, number> = { qkv: r * C + 3 * C * r, out: 2 * r * C, up: r * C + F * r, down: r * F + C * r };
  return LAYERS * targets.reduce((a, t) => a + per[t]!, 0);
}

/** Largest |a - b| / max(1, |b|). */
function maxRelDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!) / Math.max(1, Math.abs(b[i]!)));
  return d;
}

describe("LanguageModel LoRA", () => {
  it("fine-tunes the adapters only: the loss falls, and removeLora gives back the base bit for bit", async () => {
    const m = await LanguageModel.load(trained);
    const base = await m.predict(PROMPT, SHAPE);
    await m.addLora({ rank: 8, alpha: 16, targets: ["qkv", "out", "up", "down"] });
    expect(m.lora).toEqual({ rank: 8, alpha: 16, dropout: 0, targets: ["qkv", "out", "up", "down"], seed: 0 });
    // B = 0: the adapters add exact zeros until they train.
    expect(Array.from(await m.predict(PROMPT, SHAPE))).toEqual(Array.from(base));
    const losses = await fineTune(m, 80);
    const first = losses[0]!;
    const last = losses.slice(-10).reduce((a, x) => a + x, 0) / 10;
    console.log(`LoRA fine-tune: loss ${first.toFixed(3)} -> ${last.toFixed(3)} (mean of the last 10 of 80 steps)`);
    expect(first).toBeGreaterThan(1.5); // the base does not know the new text
    expect(last).toBeLessThan(0.6);
    const tuned = await m.predict(PROMPT, SHAPE);
    expect(maxRelDiff(tuned, base)).toBeGreaterThan(0.1);
    await m.removeLora();
    expect(m.lora).toBeNull();
    expect(Array.from(await m.predict(PROMPT, SHAPE))).toEqual(Array.from(base));
    const before = tensors(trained);
    const after = tensors(await m.save({ optimizer: false }));
    expect([...after.keys()].sort()).toEqual([...before.keys()].sort());
    for (const [name, w] of before) expect(Array.from(after.get(name)!), name).toEqual(Array.from(w));
    m.dispose();
  });

  it("merges the adapters into the base: the outputs are the adapters' within float32 rounding", async () => {
    const m = await LanguageModel.load(trained);
    await m.addLora({ rank: 4, alpha: 8, targets: ["qkv", "out", "up", "down", "head"], seed: 3 });
    await fineTune(m, 30);
    const adapted = await m.predict(PROMPT, SHAPE);
    const greedy = await m.generate(PROMPT.subarray(0, 5), { maxTokens: 12, temperature: 0 });
    await m.mergeLora();
    expect(m.lora).toBeNull();
    const merged = await m.predict(PROMPT, SHAPE);
    expect(maxRelDiff(merged, adapted)).toBeLessThan(1e-5);
    expect(Array.from(await m.generate(PROMPT.subarray(0, 5), { maxTokens: 12, temperature: 0 }))).toEqual(Array.from(greedy));
    // The merged model trains whole again.
    const { inputs, targets } = sampleBatch(tune, 2, 8, rng(1));
    expect(Number.isFinite((await m.trainStep(inputs, targets, { batch: 2, seq: 8 })).loss)).toBe(true);
    m.dispose();
  });

  it("trains adapters on a quantized (int8) base; the base without adapters still refuses to train, pointing to addLora", async () => {
    const m = await LanguageModel.load(trained);
    await m.quantize({ weights: "int8" });
    const { inputs, targets } = sampleBatch(tune, 2, 8, rng(1));
    await expect(m.trainStep(inputs, targets, { batch: 2, seq: 8 })).rejects.toThrow(/quantized \(int8.*add_?[lL]ora/);
    const base = await m.predict(PROMPT, SHAPE);
    await m.addLora({ rank: 8, targets: ["qkv", "out", "up", "down"] });
    const losses = await fineTune(m, 80);
    const last = losses.slice(-10).reduce((a, x) => a + x, 0) / 10;
    console.log(`QLoRA (int8) fine-tune: loss ${losses[0]!.toFixed(3)} -> ${last.toFixed(3)}`);
    expect(last).toBeLessThan(0.6);
    await expect(m.mergeLora()).rejects.toThrow(/quantized/);
    expect(m.lora).not.toBeNull(); // a refused merge changes nothing
    await m.removeLora();
    expect(Array.from(await m.predict(PROMPT, SHAPE))).toEqual(Array.from(base));
    m.dispose();
  });

  it("counts gradients and Adam moments for the adapters only", async () => {
    const full = await LanguageModel.load(trained);
    await fineTune(full, 1);
    const fullMemory = await full.memory();
    full.dispose();
    const m = await LanguageModel.load(trained);
    const targets = ["qkv", "out"];
    await m.addLora({ rank: 4 });
    await fineTune(m, 1);
    const mem = await m.memory();
    const n = adapterFloats(4, targets);
    expect(mem.gradients).toBe(4 * n);
    expect(mem.optimizer).toBe(2 * 4 * n);
    // The weights: the base's and the adapters'.
    expect(mem.parameters).toBe(fullMemory.parameters + 4 * n);
    expect(mem.gradients).toBeLessThan(fullMemory.gradients / 10);
    m.dispose();
  });

  it("refuses bad options, a second addLora, and merge or remove without adapters, naming the argument", async () => {
    const m = await LanguageModel.load(trained);
    const bad: [unknown, RegExp][] = [
      [{ rank: 0 }, /options\.rank must be a positive integer, got 0/],
      [{ rank: 2.5 }, /options\.rank must be a positive integer, got 2\.5/],
      [{ rank: "8" }, /options\.rank must be a positive integer, got "8" \(a string\)/],
      [{ alpha: 0 }, /options\.alpha must be a finite number > 0, got 0/],
      [{ alpha: Infinity }, /options\.alpha must be a finite number > 0, got Infinity/],
      [{ dropout: 1 }, /options\.dropout must be a number in \[0, 1\), got 1/],
      [{ dropout: -0.1 }, /options\.dropout must be a number in \[0, 1\), got -0\.1/],
      [{ targets: [] }, /options\.targets must be a non-empty array/],
      [{ targets: "qkv" }, /options\.targets must be a non-empty array/],
      [{ targets: ["qkv", "mlp"] }, /options\.targets\[1\] must be one of "q", "k", "v", "qkv", "out", "up", "down", "head", got "mlp"/],
      [{ targets: ["out", "out"] }, /options\.targets names "out" twice/],
      [{ seed: -1 }, /options\.seed must be an integer in \[0/],
      [{ rnak: 8 }, /options\.rnak is not a LoRA option/],
      [null, /options must be an object/],
    ];
    for (const [options, message] of bad) {
      await expect(m.addLora(options as LoraOptions), JSON.stringify(options)).rejects.toThrow(message);
    }
    // The core's own checks: q/k/v overlap qkv.
    await expect(m.addLora({ targets: ["q", "qkv"] })).rejects.toThrow(/targets.*(overlap|q.*qkv)/);
    expect(m.lora).toBeNull();
    await expect(m.mergeLora()).rejects.toThrow(/no (LoRA )?adapters|has_lora|add_lora/i);
    await expect(m.removeLora()).rejects.toThrow(/no (LoRA )?adapters|has_lora|add_lora/i);
    await m.addLora({ rank: 2, targets: ["q", "v"], dropout: 0.05 });
    expect(m.lora).toEqual({ rank: 2, alpha: 16, dropout: 0.05, targets: ["q", "v"], seed: 0 });
    await expect(m.addLora()).rejects.toThrow(/already has (LoRA )?adapters/);
    expect(m.lora?.rank).toBe(2); // unchanged
    // Still usable after every refusal.
    expect((await fineTune(m, 2)).every(Number.isFinite)).toBe(true);
    m.dispose();
  });
});
