// Reliability in Node against the real .wasm: a call that fails inside the core (a qkv::Error, an
// out-of-memory in the wasm heap) rejects that call alone and leaves the core and the other models usable;
// a non-finite loss stops the step with the weights unchanged; a saved checkpoint carries the CRC-32 of
// every tensor and a damaged one is refused naming the tensor.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkpointMetadata, init, LanguageModel, memory } from "../../web/dist/node.js";
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
    ).rejects.toThrow(/out of memory/);
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
