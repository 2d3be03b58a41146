// Reliability in Node against the real .wasm: a call that fails inside the core (a qkv::Error, an
// out-of-memory in the wasm heap) rejects that call alone and leaves the core and the other models usable;
// a non-finite loss stops the step with the weights unchanged, or under `nonFinite: "skip"` skips and
// counts it; a saved checkpoint carries the CRC-32 of every tensor and a damaged one is refused naming the
// tensor.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkpointMetadata, Classifier, init, LanguageModel, memory, Trainer } from "../../web/dist/node.js";
import type { StepProgress } from "../../web/dist/node.js";
import { rng } from "./helpers.js";

const CONFIG = { vocabSize: 12, context: 8, dModel: 16, heads: 2, layers: 1, seed: 3 };
const BATCH = 2;
const SEQ = 8;
const random = rng(5);

function batch(): { inputs: Int32Array; targets: Int32Array } {
  const inputs = new Int32Array(BATCH * SEQ).map(() => Math.floor(random() * CONFIG.vocabSize));
  const targets = new Int32Array(BATCH * SEQ).map(() => Math.floor(random() * CONFIG.vocabSize));
  return { inputs, targets };
}

async function trains(m: LanguageModel): Promise<void> {
  const { inputs, targets } = batch();
  const { loss } = await m.trainStep(inputs, targets, { batch: BATCH, seq: SEQ });
  expect(Number.isFinite(loss)).toBe(true);
  expect(loss).toBeGreaterThan(0);
}

/** The data buffer of a safetensors file (every tensor's bytes), without the header and its metadata. */
function tensorBytes(file: Uint8Array): Uint8Array {
  const header = Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  return file.subarray(8 + header);
}

/**
 * A copy of a safetensors file with the first float of `tensor` set to `value` and the CRC-32s dropped from
 * the metadata (a file without them loads unchecked, as a PyTorch state dict does). The header keeps its
 * length (padded with spaces), so the tensors stay where they were.
 */
function poisoned(file: Uint8Array, tensor: string, value: number): Uint8Array {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const n = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<string, unknown> & {
    __metadata__: Record<string, string>;
  };
  delete header.__metadata__["qkv.crc32"];
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = file.slice();
  out.fill(0x20, 8, 8 + n);
  out.set(json, 8);
  const entry = header[tensor] as { dtype: string; data_offsets: [number, number] };
  expect(entry.dtype).toBe("F32");
  new DataView(out.buffer).setFloat32(8 + n + entry.data_offsets[0], value, true);
  return out;
}

let a: LanguageModel;
let b: LanguageModel;

beforeAll(async () => {
  await init({ threads: 2 });
  a = await LanguageModel.create(CONFIG);
  b = await LanguageModel.create({ ...CONFIG, seed: 4 });
});
afterAll(() => {
  a?.dispose();
  b?.dispose();
});

describe("a failed call", () => {
  it("a qkv::Error rejects that call with an Error and the other models keep working", async () => {
    const { inputs, targets } = batch();
    inputs[3] = 99; // out of the vocabulary
    await expect(a.trainStep(inputs, targets, { batch: BATCH, seq: SEQ })).rejects.toThrow(
      /inputs\[3\] = 99 is out of range: expected a token id in \[0, 12\)/,
    );
    await trains(a);
    await trains(b);
  });

  it("a model beyond the address space rejects with an out-of-memory Error; the core stays usable", async () => {
    const before = await memory();
    // 8 layers of d_model 8192: about 6.4e9 parameters, more floats than a 32-bit address space can hold.
    await expect(
      LanguageModel.create({ vocabSize: 50000, context: 64, dModel: 8192, heads: 8, layers: 8 }),
    ).rejects.toThrow(/out of memory: .*address space/);
    await trains(a);
    await trains(b);
    expect((await memory()).models.length).toBe(before.models.length);
  });

  it("a model beyond the wasm heap's 4 GiB limit rejects with an out-of-memory Error; the core stays usable", async () => {
    const before = await memory();
    // About 1.04e9 floats of weights: 4.15 GB, representable in 32 bits but over the heap's maximum.
    await expect(
      LanguageModel.create({ vocabSize: 1_000_000, context: 8, dModel: 1024, heads: 8, layers: 1 }),
    ).rejects.toThrow(/out of memory: could not allocate \d+ bytes \(the wasm core's heap holds \d+ bytes and can grow to at most 4 GiB/);
    await trains(a);
    await trains(b);
    const after = await memory();
    expect(after.models.length).toBe(before.models.length);
    // Nothing of the refused model stays allocated: the heap in use is back where it was (within 1 MiB).
    expect(Math.abs(after.heapUsedBytes - before.heapUsedBytes)).toBeLessThan(1 << 20);
  });
});

describe("numerical faults", () => {
  it("a non-finite loss rejects the step, names it, and leaves the weights and moments unchanged", async () => {
    const m = await LanguageModel.create({ ...CONFIG, seed: 9 });
    // lr 1e30: the first update throws the weights to ~1e30, the next forward pass overflows to inf/NaN.
    await m.setLearningRate(1e30);
    await trains(m);
    const saved = await m.save({ optimizer: true });
    const { inputs, targets } = batch();
    await expect(m.trainStep(inputs, targets, { batch: BATCH, seq: SEQ })).rejects.toThrow(
      /the loss is not finite \(-?(nan|inf)\); no gradient was accumulated and the weights are unchanged/,
    );
    const after = await m.save({ optimizer: true });
    expect(Buffer.from(tensorBytes(after)).equals(Buffer.from(tensorBytes(saved)))).toBe(true);
    expect((await checkpointMetadata(after))["qkv.step"]).toBe("1");
    m.dispose();
    await trains(a); // the core is fine
  });
});

describe('nonFinite: "skip"', () => {
  const SKIP = { ...CONFIG, seed: 11, nonFinite: "skip" as const, warmupSteps: 10 };
  const shape = { batch: BATCH, seq: SEQ };

  it("skips a NaN-loss step and counts it; weights and moments stay bit for bit; the next step is a twin's", async () => {
    using m = await LanguageModel.create(SKIP);
    using twin = await LanguageModel.create(SKIP);
    expect(m.config.nonFinite).toBe("skip");
    const batches = [batch(), batch(), batch(), batch(), batch()];
    for (const { inputs, targets } of batches.slice(0, 2)) {
      const r = await m.trainStep(inputs, targets, shape);
      expect(r).toEqual({ loss: (await twin.trainStep(inputs, targets, shape)).loss, skipped: false, skippedSteps: 0 });
      expect(Number.isFinite(r.loss)).toBe(true);
    }
    const weights = await m.save({ optimizer: false });
    const before = tensorBytes(await m.save());
    // A NaN weight, as the native tests do it (through loadWeights, which keeps the optimizer state).
    await m.loadWeights(poisoned(weights, "tok_emb.weight", Number.NaN));
    const poisonedState = tensorBytes(await m.save());

    const bad = await m.trainStep(batches[2]!.inputs, batches[2]!.targets, shape);
    expect(bad.skipped).toBe(true);
    expect(bad.skippedSteps).toBe(1);
    expect(Number.isNaN(bad.loss)).toBe(true);
    const after = await m.save();
    expect(Buffer.from(tensorBytes(after)).equals(Buffer.from(poisonedState))).toBe(true);
    const meta = await checkpointMetadata(after);
    expect(meta["qkv.step"]).toBe("2"); // the schedule's position did not move
    expect(meta["qkv.skipped_steps"]).toBe("1");
    expect(JSON.parse(meta["qkv.optimizer"] ?? "{}")).toMatchObject({ non_finite: "skip" });

    await m.loadWeights(weights);
    expect(Buffer.from(tensorBytes(await m.save())).equals(Buffer.from(before))).toBe(true);
    for (const { inputs, targets } of batches.slice(3)) {
      const r = await m.trainStep(inputs, targets, shape);
      const t = await twin.trainStep(inputs, targets, shape);
      expect(r).toEqual({ loss: t.loss, skipped: false, skippedSteps: 1 });
      expect(t.skippedSteps).toBe(0);
    }
    expect(Buffer.from(tensorBytes(await m.save())).equals(Buffer.from(tensorBytes(await twin.save())))).toBe(true);

    // The count and the option travel in the checkpoint.
    using again = await LanguageModel.load(await m.save());
    expect(again.config.nonFinite).toBe("skip");
    const { inputs, targets } = batch();
    const r = await again.trainStep(inputs, targets, shape);
    expect(r).toEqual({ loss: (await m.trainStep(inputs, targets, shape)).loss, skipped: false, skippedSteps: 1 });
  });

  it("an lr that overflows the weights: the step resolves skipped, nothing changes, the Trainer reports it", async () => {
    using m = await LanguageModel.create(SKIP);
    await m.setLearningRate(1e30); // as the "error" test above: the next forward pass overflows
    await trains(m);
    const saved = await m.save();
    const { inputs, targets } = batch();
    const r = await m.trainStep(inputs, targets, shape);
    expect(r.skipped).toBe(true);
    expect(r.skippedSteps).toBe(1);
    expect(Number.isFinite(r.loss)).toBe(false);
    const after = await m.save();
    expect(Buffer.from(tensorBytes(after)).equals(Buffer.from(tensorBytes(saved)))).toBe(true);
    expect((await checkpointMetadata(after))["qkv.step"]).toBe("1");

    const data = new Int32Array(200).map((_, i) => (i * 7) % CONFIG.vocabSize);
    const seen: StepProgress[] = [];
    const fit = await new Trainer(m, { data, batchSize: BATCH, seqLen: SEQ }).fit({ steps: 2, onStep: (p) => void seen.push(p) });
    expect(seen.map((p) => [p.step, p.skipped, p.skippedSteps])).toEqual([
      [1, true, 2],
      [2, true, 3],
    ]);
    expect(Number.isFinite(fit.loss)).toBe(false);
    expect((await checkpointMetadata(await m.save()))["qkv.step"]).toBe("1");
  });

  it('the default is "error": a step result says skipped false; bad values are refused naming the field', async () => {
    using m = await LanguageModel.create({ ...CONFIG, seed: 12 });
    expect(m.config.nonFinite).toBe("error");
    const { inputs, targets } = batch();
    expect(await m.trainStep(inputs, targets, shape)).toMatchObject({ skipped: false, skippedSteps: 0 });
    using k = await Classifier.create({ vocabSize: 7, context: 5, dModel: 8, heads: 2, layers: 1, classes: 3, nonFinite: "skip" });
    expect(await k.trainStep(Int32Array.of(1, 2, 3, 0, 0), Int32Array.of(2))).toMatchObject({ skipped: false, skippedSteps: 0 });

    await expect(
      LanguageModel.create({ ...CONFIG, nonFinite: "foo" as unknown as "skip" }),
    ).rejects.toThrow(/config\.nonFinite = "foo" is unknown: expected "error" or "skip"/);
    await expect(LanguageModel.create({ ...CONFIG, nonFinite: 1 as unknown as "skip" })).rejects.toThrow(
      expect.objectContaining({ name: "TypeError", message: expect.stringMatching(/config\.nonFinite must be a string, got 1 \(a number\)/) }),
    );
    await trains(a); // the core is fine
  });
});

describe("checkpoint checksums", () => {
  it("save() carries a CRC-32 per tensor; a flipped byte is refused naming the tensor; the original loads", async () => {
    const bytes = await a.save();
    const meta = await checkpointMetadata(bytes);
    const sums = JSON.parse(meta["qkv.crc32"] ?? "null") as Record<string, string>;
    expect(Object.keys(sums)).toContain("tok_emb.weight");
    for (const v of Object.values(sums)) expect(v).toMatch(/^[0-9a-f]{8}$/);
    const bad = bytes.slice();
    bad[bad.length - 5] ^= 0x40; // inside the last tensor in the file
    await expect(LanguageModel.load(bad)).rejects.toThrow(/tensor '.+' is corrupt: its bytes have CRC-32 [0-9a-f]{8}/);
    await expect(b.loadWeights(bad)).rejects.toThrow(/is corrupt/);
    const good = await LanguageModel.load(bytes);
    expect(Buffer.from(tensorBytes(await good.save())).equals(Buffer.from(tensorBytes(bytes)))).toBe(true);
    good.dispose();
    await trains(b);
  });
});
