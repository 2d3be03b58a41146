// Explicit memory: memory() reports the live models and the wasm heap, dispose() frees (a create/dispose
// loop and a loop of failing calls keep the heap flat), `using` disposes every model kind, and a model
// garbage-collected without dispose() is reported by the FinalizationRegistry.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { Classifier, init, LanguageModel, memory, Seq2Seq } from "../../web/dist/node.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const LM = { vocabSize: 500, context: 32, dModel: 64, heads: 4, layers: 2 };

beforeAll(async () => {
  await init({ threads: 2 });
});

describe("memory", () => {
  it("reports each live model's bytes by purpose and the heap; dispose removes it", async () => {
    const before = await memory();
    const lm = await LanguageModel.create(LM);
    const s2s = await Seq2Seq.create({ srcVocab: 20, tgtVocab: 20, context: 8, dModel: 16, heads: 2, encoderLayers: 1, decoderLayers: 1 });
    const report = await memory();
    expect(report.models.length).toBe(before.models.length + 2);
    const mine = report.models.filter((m) => !before.models.some((b) => b.id === m.id));
    expect(mine.map((m) => m.kind)).toEqual(["LanguageModel", "Seq2Seq"]);
    const bytes = mine[0]!.bytes;
    expect(bytes).toEqual(await lm.memory());
    // float32 weights, one gradient each, two Adam moments each.
    expect(bytes.parameters).toBe(4 * lm.numParameters());
    expect(bytes.gradients).toBe(bytes.parameters);
    expect(bytes.optimizer).toBe(2 * bytes.parameters);
    expect(bytes.total).toBe(bytes.parameters + bytes.gradients + bytes.optimizer + bytes.activations);
    expect(report.heapBytes).toBeGreaterThanOrEqual(bytes.total);
    expect(report.heapMaxBytes).toBeGreaterThanOrEqual(2 ** 31);
    // Activations are planned by the first batch.
    await lm.trainStep(new Int32Array(4 * 32).fill(1), new Int32Array(4 * 32).fill(2), { batch: 4 });
    expect((await lm.memory()).activations).toBeGreaterThan(bytes.activations);
    lm.dispose();
    s2s.dispose();
    expect((await memory()).models.map((m) => m.id)).toEqual(before.models.map((m) => m.id));
    await expect(lm.memory()).rejects.toThrow(/LanguageModel.memory\(\) was called after dispose\(\)/);
  });

  it("a create/train/save/load/dispose loop keeps the heap flat", async () => {
    const x = new Int32Array(4 * 32).fill(3);
    const cycle = async () => {
      const m = await LanguageModel.create(LM);
      await m.trainStep(x, x, { batch: 4 });
      const again = await LanguageModel.load(await m.save());
      m.dispose();
      again.dispose();
    };
    const one = await LanguageModel.create(LM);
    const perModel = (await one.memory()).total;
    one.dispose();
    // The first cycles size what lasts (the matrix product's packing buffers); then each must give back all.
    for (let i = 0; i < 2; i++) await cycle();
    const settled = await memory();
    for (let i = 0; i < 8; i++) await cycle();
    const after = await memory();
    expect(after.models).toEqual(settled.models);
    // A leaked model would keep at least its weights, gradients and moments (about 2 MB here) per cycle.
    expect(perModel).toBeGreaterThan(2e6);
    expect(after.heapUsedBytes - settled.heapUsedBytes).toBeLessThan(perModel / 4);
  });

  it("failing calls free what they converted (errors unwind the C++ frames before reaching JS)", async () => {
    using m = await LanguageModel.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1 });
    const big = new Int32Array(1 << 20).fill(99); // 4 MB of out-of-range ids, copied into the heap per call
    const fail = async () => {
      await expect(m.trainStep(big, big, { batch: 1 << 17 })).rejects.toThrow(/inputs\[0\] = 99 is out of range/);
      await expect(m.predict(big, { batch: 1 << 17 })).rejects.toThrow(/inputs\[0\] = 99 is out of range/);
      await expect(m.generate(big, { maxTokens: 1 })).rejects.toThrow(/prompt\[0\] = 99 is out of range/);
    };
    await fail();
    const settled = await memory();
    for (let i = 0; i < 10; i++) await fail();
    const after = await memory();
    // One leaked 4 MB copy per failed call would be 120 MB.
    expect(after.heapUsedBytes - settled.heapUsedBytes).toBeLessThan(1 << 20);
  });

  it("`using` disposes every model kind", async () => {
    const before = (await memory()).models.length;
    {
      using a = await LanguageModel.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1 });
      using b = await Seq2Seq.create({ srcVocab: 10, tgtVocab: 10, context: 8, dModel: 8, heads: 2, encoderLayers: 1, decoderLayers: 1 });
      using c = await Classifier.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1, classes: 2 });
      expect((await memory()).models.length).toBe(before + 3);
      expect([a.disposed, b.disposed, c.disposed]).toEqual([false, false, false]);
    }
    expect((await memory()).models.length).toBe(before);
  });

  it("a model garbage-collected without dispose() is reported, naming its kind", () => {
    const script = `
      import { LanguageModel, Classifier } from "qkv";
      const warnings = [];
      console.warn = (...args) => warnings.push(args.join(" "));
      let lm = await LanguageModel.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1 });
      let cls = await Classifier.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1, classes: 2 });
      const kept = await LanguageModel.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1 });
      const disposed = await LanguageModel.create({ vocabSize: 10, context: 8, dModel: 8, heads: 2, layers: 1 });
      disposed.dispose();
      lm = cls = undefined;
      for (let i = 0; i < 20 && warnings.length < 2; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      console.log(JSON.stringify({ warnings, kept: kept.disposed }));`;
    const out = execFileSync(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], { cwd: root, encoding: "utf8", timeout: 60_000 });
    const r = JSON.parse(out.trim().split("\n").at(-1)!) as { warnings: string[]; kept: boolean };
    expect(r.warnings.sort()).toEqual([
      expect.stringMatching(/^qkv: Classifier #2 was garbage-collected without dispose\(\); its wasm memory stays allocated/),
      expect.stringMatching(/^qkv: LanguageModel #1 was garbage-collected without dispose\(\)/),
    ]);
  });
});
