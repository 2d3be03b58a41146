// Seq2Seq through the npm package: it learns to reverse short sequences, its logits, attention maps and
// checkpoints are consistent, and bad input rejects naming the argument.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { init, Seq2Seq, Trainer, type Seq2SeqExample } from "../../web/dist/node.js";
import { rng } from "./helpers.js";

const PAD = 0;
const BOS = 1;
const EOS = 2;
const SYMBOLS = 10; // ids 3..12
const V = 3 + SYMBOLS;
const CONFIG = {
  srcVocab: V,
  tgtVocab: V,
  context: 16,
  dModel: 32,
  heads: 4,
  encoderLayers: 1,
  decoderLayers: 1,
  dFF: 64,
  // Warm-up and cosine decay: at a constant 3e-3 the loss spikes now and then late in training (seen at step
  // 299 of 300 on the relaxed-SIMD build, whose only difference is the rounding of fused multiply-adds), and a
  // test that stops on a spike fails by chance. With the schedule both builds end at held-out loss 0.008.
  lr: 5e-3,
  schedule: "cosine" as const,
  warmupSteps: 20,
  totalSteps: 300,
  minLr: 5e-4,
  weightDecay: 0,
};

/** A random sequence of 3 to 6 symbols; the target is it reversed, between bos and eos. */
function examples(n: number, seed: number): Seq2SeqExample[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const src = Int32Array.from({ length: 3 + Math.floor(r() * 4) }, () => 3 + Math.floor(r() * SYMBOLS));
    return { src, tgt: Int32Array.of(BOS, ...Array.from(src).reverse(), EOS) };
  });
}

const train = examples(2000, 3);
const test = examples(100, 4);
let model: Seq2Seq;

/** Two examples padded into one batch: src (2, 5), tgtIn/tgtOut (2, 4); the second row is shorter. */
function paddedBatch(): { src: Int32Array; tgtIn: Int32Array; tgtOut: Int32Array } {
  return {
    src: Int32Array.of(3, 4, 5, 6, 7, 8, 9, 10, PAD, PAD),
    tgtIn: Int32Array.of(BOS, 7, 6, 5, BOS, 10, 9, PAD),
    tgtOut: Int32Array.of(7, 6, 5, EOS, 10, 9, EOS, PAD),
  };
}

beforeAll(async () => {
  await init({ threads: 2 });
  model = await Seq2Seq.create(CONFIG);
  // Learning: 300 steps of 32 examples with the Trainer (about 10 s on 2 cores).
  const trainer = new Trainer(model, { data: train, evalData: test, batchSize: 32, seed: 1 });
  const { evals } = await trainer.fit({ steps: 300, evalEvery: 150 });
  console.log(`seq2seq reversal: held-out loss ${evals.map((e) => e.loss.toFixed(3)).join(" -> ")}, token accuracy ${evals.at(-1)!.accuracy.toFixed(3)}`);
});
afterAll(() => model?.dispose());

describe("Seq2Seq", () => {
  it("learns to reverse sequences: at least 95 of 100 held-out sequences exactly right with greedy decoding", async () => {
    let exact = 0;
    // All 100 at once: (100, 6) sources padded, decoded in one batch; each row compared up to its eos.
    const srcLen = 6;
    const src = new Int32Array(test.length * srcLen).fill(PAD);
    test.forEach((e, b) => src.set(e.src, b * srcLen));
    const out = await model.generate(src, { maxTokens: 8, bos: BOS, eos: EOS, batch: test.length });
    expect(out.length).toBe(test.length * 8);
    test.forEach((e, b) => {
      const want = [...Array.from(e.src).reverse(), EOS];
      const got = Array.from(out.subarray(b * 8, b * 8 + want.length));
      if (want.every((v, i) => got[i] === v) && out.subarray(b * 8 + want.length, (b + 1) * 8).every((v) => v === PAD)) exact++;
    });
    console.log(`exact reversals: ${exact} / ${test.length}`);
    expect(exact).toBeGreaterThanOrEqual(95);
    // One row alone decodes the same as within the batch (padding does not leak across rows).
    const alone = await model.generate(test[7]!.src, { maxTokens: 8, bos: BOS, eos: EOS });
    expect(alone).toEqual(out.subarray(7 * 8, 8 * 8));
  });

  it("beam search: width 1 and the uncached decoder give greedy's rows; width 4 reverses as well", async () => {
    const srcLen = 6;
    const src = new Int32Array(20 * srcLen).fill(PAD);
    test.slice(0, 20).forEach((e, b) => src.set(e.src, b * srcLen));
    const base = { maxTokens: 8, bos: BOS, eos: EOS, batch: 20 };
    const greedy = await model.generate(src, base);
    expect(await model.generate(src, { ...base, beamWidth: 1 })).toEqual(greedy);
    expect(await model.generate(src, { ...base, useCache: false })).toEqual(greedy);
    const beams = await model.generate(src, { ...base, beamWidth: 4, lengthPenalty: 0.6 });
    expect(await model.generate(src, { ...base, beamWidth: 4, useCache: false })).toEqual(beams);
    let exact = 0;
    test.slice(0, 20).forEach((e, b) => {
      const want = [...Array.from(e.src).reverse(), EOS];
      if (want.every((v, i) => beams[b * 8 + i] === v)) exact++;
    });
    expect(exact).toBeGreaterThanOrEqual(19);
  });

  it("predict's cross-entropy over non-pad targets is evaluate's loss", async () => {
    const { src, tgtIn, tgtOut } = paddedBatch();
    const logits = await model.predict(src, tgtIn, { batch: 2 });
    expect(logits.length).toBe(2 * 4 * V);
    let sum = 0;
    let count = 0;
    tgtOut.forEach((t, r) => {
      if (t === PAD) return;
      const row = logits.subarray(r * V, (r + 1) * V);
      const max = Math.max(...row);
      sum += Math.log(row.reduce((z, v) => z + Math.exp(v - max), 0)) + max - row[t]!;
      count++;
    });
    const m = await model.evaluate(src, tgtIn, tgtOut, { batch: 2 });
    expect(m.count).toBe(7);
    expect(count).toBe(7);
    expect(Math.abs(sum / count - m.loss)).toBeLessThan(1e-5);
  });

  it("attention: encoder (S,S), causal decoder (T,T) and cross (T,S) maps, padding masked, rows summing to 1", async () => {
    const { src, tgtIn } = paddedBatch();
    await model.predict(src, tgtIn, { batch: 2 });
    const check = (a: Float32Array, rows: number, cols: number, zero: (i: number, j: number) => boolean) => {
      expect(a.length).toBe(rows * cols);
      for (let i = 0; i < rows; i++) {
        let sum = 0;
        for (let j = 0; j < cols; j++) {
          if (zero(i, j)) expect(a[i * cols + j]).toBe(0);
          sum += a[i * cols + j]!;
        }
        expect(Math.abs(sum - 1)).toBeLessThan(1e-5);
      }
    };
    // Row 1 of the batch: its source has 3 real tokens then 2 pads; its target input 3 real, 1 pad.
    check(await model.attention({ layer: 0, head: 2, kind: "encoder", batchIndex: 1 }), 5, 5, (_, j) => j >= 3);
    check(await model.attention({ layer: 0, head: 1, kind: "decoder", batchIndex: 1 }), 4, 4, (i, j) => j > i || (j >= 3 && i < 3));
    check(await model.attention({ layer: 0, head: 3, kind: "cross", batchIndex: 1 }), 4, 5, (_, j) => j >= 3);
    check(await model.attention({ layer: 0, head: 0, kind: "cross" }), 4, 5, () => false);
    await expect(model.attention({ layer: 0, head: 0, kind: "self" as "encoder" })).rejects.toThrow(/options.kind must be "encoder", "decoder" or "cross", got "self"/);
    await expect(model.attention({ layer: 0, head: 0 } as { layer: number; head: number; kind: "encoder" })).rejects.toThrow(/options.kind must be/);
    await expect(model.attention({ layer: 1, head: 0, kind: "decoder" })).rejects.toThrow(/layer = 1 is out of range/);
    // After generate() the encoder's map is known (the source), the decoder's is not.
    await model.generate(Int32Array.of(3, 4, 5), { maxTokens: 4, bos: BOS, eos: EOS });
    check(await model.attention({ layer: 0, head: 0, kind: "encoder" }), 3, 3, () => false);
    await expect(model.attention({ layer: 0, head: 0, kind: "cross" })).rejects.toThrow(/call predict\(\) on the sequence first/);
  });

  it("save then load gives identical logits and decoding; without the optimizer the file is smaller", async () => {
    const { src, tgtIn } = paddedBatch();
    const bytes = await model.save();
    using again = await Seq2Seq.load(bytes);
    expect(again.config).toEqual(model.config);
    expect(await again.predict(src, tgtIn, { batch: 2 })).toEqual(await model.predict(src, tgtIn, { batch: 2 }));
    expect(await again.generate(test[0]!.src, { maxTokens: 8, bos: BOS, eos: EOS })).toEqual(
      await model.generate(test[0]!.src, { maxTokens: 8, bos: BOS, eos: EOS }),
    );
    const light = await model.save({ optimizer: false });
    expect(light.length).toBeLessThan(bytes.length / 2);
    using third = await Seq2Seq.load(light);
    expect(await third.predict(src, tgtIn, { batch: 2 })).toEqual(await model.predict(src, tgtIn, { batch: 2 }));
  });
});

describe("Seq2Seq bad input rejects naming the argument; the model stays usable", () => {
  async function usable(): Promise<void> {
    const { src, tgtIn, tgtOut } = paddedBatch();
    const m = await model.evaluate(src, tgtIn, tgtOut, { batch: 2 });
    expect(Number.isFinite(m.loss)).toBe(true);
  }

  it("wrong types, lengths and ids", async () => {
    const { src, tgtIn, tgtOut } = paddedBatch();
    const cases: [() => Promise<unknown>, RegExp][] = [
      [() => model.trainStep([1, 2] as unknown as Int32Array, tgtIn, tgtOut), /src must be an Int32Array.*an Array/],
      [() => model.trainStep(src, tgtIn, "x" as unknown as Int32Array, { batch: 2 }), /tgtOut must be an Int32Array/],
      [() => model.trainStep(src, tgtIn, tgtOut.subarray(1), { batch: 2 }), /tgtOut.length must equal tgtIn.length \(8\), got 7/],
      [() => model.trainStep(src, tgtIn, tgtOut, { batch: 3 }), /src.length \(10\) is not a multiple of batch \(3\)/],
      [() => model.trainStep(src.map((v, i) => (i === 2 ? 99 : v)), tgtIn, tgtOut, { batch: 2 }), /src\[2\] = 99 is out of range/],
      [() => model.evaluate(src, tgtIn, tgtOut.map((v, i) => (i === 1 ? -3 : v)), { batch: 2 }), /tgt_out\[1\] = -3 is out of range|tgtOut\[1\] = -3/],
      [() => model.trainStep(src, tgtIn, new Int32Array(8).fill(PAD), { batch: 2 }), /holds only pad_id/],
      [() => model.predict(src, tgtIn, { batch: 0 }), /batch must be a positive integer, got 0/],
      [() => model.generate(src, { maxTokens: 16, bos: BOS, eos: EOS, batch: 2 }), /max_len = 16 is invalid: expected 1 <= max_len < context = 16/],
      [() => model.generate(src, { maxTokens: 4, bos: V, eos: EOS, batch: 2 }), /bos = 13 is out of range/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS } as unknown as { maxTokens: number; bos: number; eos: number }), /options.eos must be an integer, got undefined/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS, eos: EOS, beam: 4 } as unknown as { maxTokens: number; bos: number; eos: number }), /options.beam is not a Seq2Seq.generate option/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS, eos: EOS, batch: 2, beamWidth: 0 }), /options\.beamWidth must be an integer from 1 to 64, got 0/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS, eos: EOS, batch: 2, beamWidth: 65 }), /options\.beamWidth must be an integer from 1 to 64, got 65/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS, eos: EOS, batch: 2, lengthPenalty: -1 }), /options\.lengthPenalty must be a finite number >= 0, got -1/],
      [() => model.generate(src, { maxTokens: 4, bos: PAD, eos: EOS, batch: 2 }), /bos = 0 is pad_id/],
      [() => model.evaluate(src, tgtIn, new Int32Array(8).fill(PAD), { batch: 2 }), /holds only pad_id/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS, eos: EOS, batch: 2, beamWidth: 1.5 }), /options\.beamWidth must be an integer, got 1\.5/],
      [() => model.generate(src, { maxTokens: 4, bos: BOS, eos: EOS, useCache: 1 as unknown as boolean }), /options.useCache must be true or false/],
      [() => Seq2Seq.create({ ...CONFIG, encoderLayers: 0 }), /encoder_layers = 0 is invalid/],
      [() => Seq2Seq.create({ ...CONFIG, padId: V }), /pad_id = 13 is invalid/],
      [() => Seq2Seq.create({ ...CONFIG, labelSmoothing: "0.1" as unknown as number }), /config.labelSmoothing must be a number, got "0.1" \(a string\)/],
      [() => Seq2Seq.create({ ...CONFIG, layers: 2 } as unknown as typeof CONFIG), /config.layers is not a Seq2Seq option \(known: srcVocab, tgtVocab/],
      [() => Seq2Seq.create({ ...CONFIG, activation: "swish" as "relu" }), /config.activation = "swish" is unknown: expected "relu", "gelu" or "gelu_tanh"/],
    ];
    for (const [call, message] of cases) {
      await expect(call()).rejects.toThrow(message);
      await usable();
    }
  });

  it("a checkpoint of another kind, a truncated one, and a disposed model", async () => {
    const bytes = await model.save({ optimizer: false });
    await expect(Seq2Seq.load(bytes.subarray(0, bytes.length >> 1))).rejects.toThrow(/truncated/);
    const { LanguageModel } = await import("../../web/dist/node.js");
    await expect(LanguageModel.load(bytes)).rejects.toThrow(/seq2seq/);
    const m = await Seq2Seq.create(CONFIG);
    m.dispose();
    const { src, tgtIn, tgtOut } = paddedBatch();
    await expect(m.trainStep(src, tgtIn, tgtOut, { batch: 2 })).rejects.toThrow(/Seq2Seq.trainStep\(\) was called after dispose\(\)/);
    await expect(m.save()).rejects.toThrow(/Seq2Seq.save\(\) was called after dispose\(\)/);
    await usable();
  });
});
