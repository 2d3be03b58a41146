// Trainer: a language model fits a small text through it, progress and evaluation arrive when promised,
// an AbortSignal stops it between steps with the model intact, two models train at once without touching
// each other, and bad input rejects naming the argument.
import { beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, Classifier, init, LanguageModel, Trainer, type StepProgress } from "../../web/dist/node.js";
import { PATTERN_TEXT } from "./helpers.js";

let ids: Int32Array;
let vocab: number;
let cut: number;
const config = () => ({ vocabSize: vocab, context: 32, dModel: 32, heads: 4, layers: 1, lr: 1e-2, seed: 3 });

beforeAll(async () => {
  await init({ threads: 2 });
  const tok = await CharTokenizer.fromText(PATTERN_TEXT);
  ids = await tok.encode(PATTERN_TEXT);
  vocab = tok.size;
  cut = Math.floor(ids.length * 0.9);
});

describe("Trainer", () => {
  it("fits a small text: held-out loss below 0.15 after 100 steps, with onStep and onEval as promised", async () => {
    using lm = await LanguageModel.create(config());
    const trainer = new Trainer(lm, { data: ids.subarray(0, cut), evalData: ids.subarray(cut), batchSize: 8, seqLen: 32 });
    const steps: StepProgress[] = [];
    const evalSteps: number[] = [];
    const result = await trainer.fit({
      steps: 100,
      evalEvery: 40,
      onStep: (p) => {
        steps.push(p);
      },
      onEval: async (e) => {
        await new Promise((r) => setTimeout(r, 1)); // an async callback is awaited
        evalSteps.push(e.step);
      },
    });
    expect(steps.map((p) => p.step)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    for (const p of steps) {
      expect(Number.isFinite(p.loss)).toBe(true);
      expect(p.tokensPerSecond).toBeGreaterThan(0);
    }
    // Every 40 steps and after the last.
    expect(evalSteps).toEqual([40, 80, 100]);
    expect(result.evals.map((e) => e.step)).toEqual([40, 80, 100]);
    expect(result.step).toBe(100);
    expect(result.loss).toBe(steps.at(-1)!.loss);
    const final = result.evals.at(-1)!;
    console.log(`trainer: held-out loss ${result.evals.map((e) => e.loss.toFixed(3)).join(" -> ")}, accuracy ${final.accuracy.toFixed(3)}`);
    expect(final.loss).toBeLessThan(0.15);
    // Consecutive non-overlapping windows of 32 over the held-out tokens.
    expect(final.count).toBe(Math.floor((ids.length - cut - 1) / 32) * 32);
    // evaluate() alone gives the same figures as the last evaluation.
    expect(await trainer.evaluate()).toEqual({ loss: final.loss, accuracy: final.accuracy, perplexity: final.perplexity, count: final.count });
    // fit() again continues the step count.
    expect((await trainer.fit({ steps: 2 })).step).toBe(102);
  });

  it("an AbortSignal stops between steps with an AbortError; the model stays usable", async () => {
    using lm = await LanguageModel.create(config());
    const trainer = new Trainer(lm, { data: ids, batchSize: 4, seqLen: 16 });
    const controller = new AbortController();
    const err = await trainer
      .fit({
        steps: 50,
        signal: controller.signal,
        onStep: ({ step }) => {
          if (step === 5) controller.abort();
        },
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).name).toBe("AbortError");
    expect(trainer.step).toBe(5);
    // An already aborted signal (with a reason of the caller's) takes no step at all.
    const stop = new AbortController();
    stop.abort(new Error("page closed"));
    await expect(trainer.fit({ steps: 3, signal: stop.signal })).rejects.toThrow(/page closed/);
    expect(trainer.step).toBe(5);
    // The model trains, evaluates and saves as if nothing happened.
    expect((await trainer.fit({ steps: 3 })).step).toBe(8);
    // An abort during an evaluation stops it between its batches: a signal that turns aborted at its third reading
    // (the step's check, then one before each evaluation batch: the second batch's).
    const evaluating = new Trainer(lm, { data: ids, evalData: ids, batchSize: 2, seqLen: 16 });
    let reads = 0;
    const reason = new Error("stop evaluating");
    const late = { get aborted() { return ++reads >= 3; }, reason, addEventListener() {}, removeEventListener() {} };
    await expect(evaluating.fit({ steps: 1, signal: late as unknown as AbortSignal })).rejects.toBe(reason);
    expect(reads).toBe(3);
    expect(evaluating.step).toBe(1);
    const again = await LanguageModel.load(await lm.save());
    again.dispose();
  });

  it("two models train at once, each exactly as it would alone", async () => {
    const alone = async (): Promise<number[]> => {
      using m = await LanguageModel.create(config());
      const losses: number[] = [];
      await new Trainer(m, { data: ids, batchSize: 4, seqLen: 16, seed: 9 }).fit({ steps: 15, onStep: (p) => void losses.push(p.loss) });
      return losses;
    };
    const reference = await alone();
    const [a, b] = await Promise.all([alone(), alone()]);
    expect(a).toEqual(reference);
    expect(b).toEqual(reference);
    // And a different model kind beside a language model.
    using c = await Classifier.create({ vocabSize: 8, context: 6, dModel: 16, heads: 2, layers: 1, classes: 2 });
    const examples = Array.from({ length: 8 }, (_, i) => ({ tokens: Int32Array.of(1, (i % 6) + 2, 3), label: i % 2 }));
    const [lmLosses] = await Promise.all([alone(), new Trainer(c, { data: examples, batchSize: 4 }).fit({ steps: 10 })]);
    expect(lmLosses).toEqual(reference);
  });

  it("bad input rejects naming the argument; a failed step leaves the model usable", async () => {
    using lm = await LanguageModel.create(config());
    expect(() => new Trainer(lm, { data: ids.subarray(0, 10), batchSize: 2, seqLen: 16 })).toThrow(/options.data has 10 tokens: expected at least seqLen \+ 1 = 17/);
    expect(() => new Trainer(lm, { data: Array.from(ids) as unknown as Int32Array, batchSize: 2 })).toThrow(/options.data must be an Int32Array.*an Array/);
    expect(() => new Trainer(lm, { data: ids, batchSize: 0 })).toThrow(/options.batchSize must be a positive integer, got 0/);
    expect(() => new Trainer(lm, { data: ids, batchSize: 2, epochs: 3 } as unknown as { data: Int32Array; batchSize: number })).toThrow(/options.epochs is not a Trainer option/);
    const trainer = new Trainer(lm, { data: ids, batchSize: 2, seqLen: 16 });
    await expect(trainer.fit({ steps: 0 })).rejects.toThrow(/options.steps must be a positive integer, got 0/);
    await expect(trainer.fit({ steps: 1, onStep: "log" as unknown as () => void })).rejects.toThrow(/options.onStep must be a function/);
    await expect(trainer.evaluate()).rejects.toThrow(/evaluate\(\) needs options.evalData/);
    // Windows longer than the context: the core's check, at the first step.
    await expect(new Trainer(lm, { data: ids, batchSize: 2, seqLen: 64 }).fit({ steps: 1 })).rejects.toThrow(/seq = 64 is invalid: expected 1 <= seq <= context = 32/);
    // A token id out of range in the data: the step fails, the count does not move, the model still trains.
    const bad = ids.slice(0, 200);
    bad.fill(vocab + 5, 0, 200);
    const failing = new Trainer(lm, { data: bad, batchSize: 2, seqLen: 16 });
    await expect(failing.fit({ steps: 1 })).rejects.toThrow(/inputs\[0\] = \d+ is out of range/);
    expect(failing.step).toBe(0);
    expect((await trainer.fit({ steps: 2 })).step).toBe(2);
    using cls = await Classifier.create({ vocabSize: 8, context: 6, dModel: 16, heads: 2, layers: 1, classes: 2 });
    expect(() => new Trainer(cls, { data: [{ tokens: Int32Array.of(1, 2), label: 0 }], batchSize: 2, seqLen: 4 })).toThrow(/options.seqLen is for a LanguageModel only/);
    expect(() => new Trainer(cls, { data: [{ tokens: Int32Array.of(1, 2), label: "a" as unknown as number }], batchSize: 2 })).toThrow(/options.data\[0\].label must be an integer, got "a"/);
    expect(() => new Trainer(cls, { data: [], batchSize: 2 })).toThrow(/options.data must be a non-empty array of \{ tokens, label \} examples/);
    // Each example checked against the model when the Trainer is made, named by its index: evalData's too (the core
    // would see it only at the first evaluation, after every step).
    const good = { tokens: Int32Array.of(1, 2), label: 1 };
    expect(() => new Trainer(cls, { data: [good], evalData: [good, { tokens: Int32Array.of(3), label: 5 }], batchSize: 2 })).toThrow(
      /options\.evalData\[1\]\.label = 5 is out of range: expected a class in \[0, 2\)/,
    );
    expect(() => new Trainer(cls, { data: [good, { tokens: Int32Array.of(1, 8), label: 0 }], batchSize: 2 })).toThrow(
      /options\.data\[1\]\.tokens\[1\] = 8 is out of range: expected a token id in \[0, 8\)/,
    );
    expect(() => new Trainer(cls, { data: [{ tokens: new Int32Array(7).fill(1), label: 0 }], batchSize: 2 })).toThrow(
      /options\.data\[0\]\.tokens has 7 tokens: expected at most the model's context, 6/,
    );
  });
});
