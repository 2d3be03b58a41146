// Classifier through the npm package: it learns a counting rule to >= 95% held-out accuracy, its logits,
// attention and checkpoints are consistent, and bad input rejects naming the argument.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Classifier, init, Trainer, type ClassifierExample } from "../../web/dist/node.js";
import { rng } from "./helpers.js";

const PAD = 0;
const CLS = 1;
const V = 16; // ids 2..15 are words
const CONFIG = { vocabSize: V, context: 16, dModel: 32, heads: 4, layers: 2, dFF: 64, classes: 2, lr: 1e-3, weightDecay: 0 };

/**
 * [CLS] then 4 to 12 random words; the label is 1 when word 7 occurs more often than word 8, else 0 (ties
 * are broken by changing one word, so the two classes are balanced and every example has an answer).
 */
function examples(n: number, seed: number): ClassifierExample[] {
  const r = rng(seed);
  const count = (s: number[], w: number) => s.filter((t) => t === w).length;
  const out: ClassifierExample[] = [];
  while (out.length < n) {
    const len = 4 + Math.floor(r() * 9);
    const s = [CLS, ...Array.from({ length: len }, () => 2 + Math.floor(r() * (V - 2)))];
    if (count(s, 7) === count(s, 8)) s[1 + Math.floor(r() * len)] = r() < 0.5 ? 7 : 8;
    if (count(s, 7) === count(s, 8)) continue;
    out.push({ tokens: Int32Array.from(s), label: count(s, 7) > count(s, 8) ? 1 : 0 });
  }
  return out;
}

const train = examples(2000, 5);
const test = examples(400, 6);
let model: Classifier;

/** The held-out examples padded into one (400, 13) batch. */
function padded(rows: ClassifierExample[]): { tokens: Int32Array; labels: Int32Array; seq: number } {
  const seq = Math.max(...rows.map((e) => e.tokens.length));
  const tokens = new Int32Array(rows.length * seq).fill(PAD);
  rows.forEach((e, b) => tokens.set(e.tokens, b * seq));
  return { tokens, labels: Int32Array.from(rows, (e) => e.label), seq };
}

beforeAll(async () => {
  await init({ threads: 2 });
  model = await Classifier.create(CONFIG);
  // 300 steps of 32 examples (about 10 s on 2 cores).
  const trainer = new Trainer(model, { data: train, batchSize: 32, seed: 2 });
  await trainer.fit({ steps: 300 });
});
afterAll(() => model?.dispose());

describe("Classifier", () => {
  it("learns 'more 7s than 8s' to at least 95% accuracy on 400 held-out sequences", async () => {
    const { tokens, labels, seq } = padded(test);
    const logits = await model.predict(tokens, { seq });
    expect(logits.length).toBe(test.length * 2);
    let correct = 0;
    test.forEach((e, b) => {
      if ((logits[2 * b + 1]! > logits[2 * b]! ? 1 : 0) === e.label) correct++;
    });
    const m = await model.evaluate(tokens, labels, { seq });
    console.log(`classifier held-out accuracy ${(correct / test.length).toFixed(3)}, loss ${m.loss.toFixed(4)}`);
    expect(correct / test.length).toBeGreaterThanOrEqual(0.95);
    // evaluate() counts the same argmax.
    expect(m.count).toBe(test.length);
    expect(m.accuracy).toBeCloseTo(correct / test.length, 9);
  });

  it("padding does not change a row's logits", async () => {
    const e = test[3]!;
    const alone = await model.predict(e.tokens);
    const longer = new Int32Array(e.tokens.length + 3).fill(PAD);
    longer.set(e.tokens);
    const withPad = await model.predict(longer);
    expect(Math.max(...alone.map((v, i) => Math.abs(v - withPad[i]!)))).toBeLessThan(1e-5);
  });

  it("attention: one head's (seq, seq) map, pad keys masked, rows summing to 1", async () => {
    const rows = [test[0]!, test[1]!];
    const { tokens, seq } = padded(rows);
    await model.predict(tokens, { seq });
    for (const batchIndex of [0, 1]) {
      const real = rows[batchIndex]!.tokens.length;
      const a = await model.attention({ layer: 1, head: 2, batchIndex });
      expect(a.length).toBe(seq * seq);
      for (let i = 0; i < seq; i++) {
        let sum = 0;
        for (let j = 0; j < seq; j++) {
          if (j >= real) expect(a[i * seq + j]).toBe(0);
          sum += a[i * seq + j]!;
        }
        expect(Math.abs(sum - 1)).toBeLessThan(1e-5);
      }
    }
  });

  it("save then load gives identical logits", async () => {
    const { tokens, seq } = padded(test.slice(0, 20));
    using again = await Classifier.load(await model.save());
    expect(again.config).toEqual(model.config);
    expect(again.config.pooling).toBe("first");
    expect(again.config.head).toBe("mlp");
    expect(await again.predict(tokens, { seq })).toEqual(await model.predict(tokens, { seq }));
  });

  it("bad input rejects naming the argument, and the model stays usable", async () => {
    const { tokens, labels, seq } = padded(test.slice(0, 4));
    const cases: [() => Promise<unknown>, RegExp][] = [
      [() => model.trainStep(tokens, Int32Array.of(0, 1, 2, 1), { seq }), /labels\[2\] = 2 is out of range/],
      [() => model.trainStep(tokens, [0, 1, "1", 0] as unknown as number[], { seq }), /labels\[2\] must be an integer, got "1" \(a string\)/],
      [() => model.trainStep(tokens, Int32Array.of(0, 1, 1)), /tokens.length \(\d+\) is not a multiple of batch \(3\)/],
      [() => model.evaluate(tokens, labels.subarray(1), { batch: 4, seq }), /labels has 3 entries: expected batch = 4/],
      [() => model.evaluate(tokens.subarray(0, 2 * seq * 2), labels, { batch: 2, seq: 2 * seq }), /seq = 26 is invalid: expected 1 <= seq <= context = 16/],
      [() => model.predict(tokens.map((v) => (v === 9 ? V : v)), { seq }), /tokens\[\d+\] = 16 is out of range/],
      [() => model.predict(new Float32Array(tokens) as unknown as Int32Array, { seq }), /tokens must be an Int32Array.*a Float32Array/],
      [() => model.attention({ layer: 2, head: 0 }), /layer = 2 is out of range/],
      [() => model.attention({ layer: -1, head: 0 }), /options.layer must be an integer in \[0, \d+\], got -1/],
      [() => Classifier.create({ ...CONFIG, classes: 1 }), /classes = 1 is invalid/],
      [() => Classifier.create({ ...CONFIG, pooling: "max" as "mean" }), /config.pooling = "max" is unknown: expected "first" or "mean"/],
      [() => Classifier.create({ ...CONFIG, head: 2 as unknown as "mlp" }), /config.head must be a string, got 2 \(a number\)/],
      [() => Classifier.create({ ...CONFIG, bias: 1 as unknown as boolean }), /config.bias must be true or false, got 1 \(a number\)/],
      [() => Classifier.create(null as unknown as typeof CONFIG), /config must be an object/],
      [() => Classifier.create({ ...CONFIG, classes: undefined } as unknown as typeof CONFIG), /config.classes is missing: it is required/],
    ];
    for (const [call, message] of cases) {
      await expect(call()).rejects.toThrow(message);
      const m = await model.evaluate(tokens, labels, { seq });
      expect(m.accuracy).toBeGreaterThan(0.5);
    }
  });
});
