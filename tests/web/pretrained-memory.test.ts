// The memory LanguageModel.fromPretrained takes (issue 35: "peak wasm + JS memory while loading <= 1.3x the
// weights"), in a process of its own (vitest runs each file in one): a GPT-2 of about 109 MB in the Hub's layout
// (Conv1D weights stored (in, out), F32) is written here, no model of that size having been built in this process,
// so that the wasm heap's growth measures the load alone. model.safetensors streams into the core (load-stream.ts
// streamIn, qkv/pretrained_loader.h) without a second whole copy: before, importPretrained copied the whole file
// into the heap beside the model (2x). Then an abort midway, which must leave nothing in the core.
import { describe, expect, it } from "vitest";
import { LanguageModel, memory } from "../../web/dist/node.js";
import { randomSafetensors } from "./helpers.js";

// 109 MB of weights: more than the core's initial 64 MiB heap, so that a load holding a second copy of the file
// (importPretrained's bytes beside the model: 2x) grows the heap by more than 1.3x the weights, and this test fails.
const V = 16384, P = 512, C = 768, L = 2, H = 12;

/** A GPT-2's model.safetensors in the Hub's names (GPT2Model: bare, no lm_head), random F32 (or BF16) values. */
function gpt2File(dtype: "F32" | "BF16" = "F32"): Uint8Array {
  const tensors: [string, number[]][] = [["wte.weight", [V, C]], ["wpe.weight", [P, C]]];
  for (let l = 0; l < L; l++) {
    const h = `h.${l}.`;
    tensors.push(
      [`${h}ln_1.weight`, [C]], [`${h}ln_1.bias`, [C]],
      [`${h}attn.c_attn.weight`, [C, 3 * C]], [`${h}attn.c_attn.bias`, [3 * C]],
      [`${h}attn.c_proj.weight`, [C, C]], [`${h}attn.c_proj.bias`, [C]],
      [`${h}ln_2.weight`, [C]], [`${h}ln_2.bias`, [C]],
      [`${h}mlp.c_fc.weight`, [C, 4 * C]], [`${h}mlp.c_fc.bias`, [4 * C]],
      [`${h}mlp.c_proj.weight`, [4 * C, C]], [`${h}mlp.c_proj.bias`, [C]],
    );
  }
  tensors.push(["ln_f.weight", [C]], ["ln_f.bias", [C]]);
  return randomSafetensors(tensors, { format: "pt" }, dtype);
}

const config = JSON.stringify({
  model_type: "gpt2", n_layer: L, n_head: H, n_embd: C, n_positions: P, vocab_size: V,
  activation_function: "gelu_new", layer_norm_epsilon: 1e-5,
});

/**
 * Runs a load with a progress callback and measures what it took: the wasm heap's allocated bytes after it (`used`)
 * and at the peak sampled between pieces (`usedPeak`: memory() is answered between two of the load's calls, so a
 * core that kept the bytes until the end shows here even if it freed them before the load resolved), the heap's
 * growth (`grown`), and the JS buffers besides the wasm memory at the peak (`js`: the piece in flight and its
 * clone; the wasm memory is one of this thread's ArrayBuffers only where the core runs on it, not in its Worker,
 * and then its growth is taken out).
 */
async function measureLoad<T>(load: (onProgress: () => void) => Promise<T>) {
  const before = await memory();
  const base = process.memoryUsage().arrayBuffers;
  let peak = base;
  let events = 0;
  let heapPeak = before.heapUsedBytes;
  const heapSamples: Promise<void>[] = [];
  const sample = () => {
    events++;
    peak = Math.max(peak, process.memoryUsage().arrayBuffers);
    heapSamples.push(memory().then((m) => void (heapPeak = Math.max(heapPeak, m.heapUsedBytes))));
  };
  const model = await load(sample);
  sample();
  await Promise.all(heapSamples);
  const after = await memory();
  const used = after.heapUsedBytes - before.heapUsedBytes;
  const grown = after.heapBytes - before.heapBytes;
  const wasmHere = process.memoryUsage().arrayBuffers - base >= grown;
  const js = peak - base - (wasmHere ? grown : 0);
  return { model, used, grown, js, usedPeak: heapPeak - before.heapUsedBytes, events: events - 1, heapBefore: before.heapBytes };
}

describe("LanguageModel.fromPretrained memory", () => {
  const file = gpt2File();

  it("takes about the weights: wasm heap and JS buffers grow by at most 1.3x the weights while they stream in", async () => {
    expect(file.length).toBeGreaterThan(100e6);
    // The bytes given whole (what a user holding them passes): before, they were copied whole into the core.
    const { model, used, grown, js, usedPeak, events, heapBefore } = await measureLoad((sample) =>
      LanguageModel.fromPretrained({ "config.json": config, "model.safetensors": file }, { onProgress: sample }),
    );
    using m = model;
    const weights = 4 * m.numParameters();
    expect(weights).toBeGreaterThan(0.99 * (file.length - 8192)); // F32, no buffers: the file is the weights
    console.log(
      `pretrained-memory: weights ${weights} bytes (file ${file.length}); wasm heap: ${used} bytes allocated ` +
        `(${(used / weights).toFixed(2)}x; ${usedPeak} at the peak sampled between pieces), grown by ${grown} ` +
        `(${(grown / weights).toFixed(2)}x) from ${heapBefore}; other JS buffers at the peak: ${js} ` +
        `(${(js / weights).toFixed(2)}x); ${events} progress events`,
    );
    expect(used).toBeGreaterThanOrEqual(weights * 0.95); // the weights are there
    expect(used + js).toBeLessThanOrEqual(1.3 * weights);
    expect(usedPeak + js).toBeLessThanOrEqual(1.3 * weights);
    expect(grown).toBeLessThanOrEqual(1.3 * weights);
    expect(events).toBeGreaterThan(5); // piece by piece, not once at the end
    const bytes = await m.memory();
    expect(bytes.gradients).toBe(0);
    expect(bytes.parameters).toBe(weights);
    // The weights are the file's: GPT-2's Conv1D stored (in, out) was transposed, so the logits are those of the
    // model importPretrained builds from the same bytes (the whole-bytes path), bit for bit.
    using ref = await LanguageModel.importPretrained(config, file);
    const ids = Int32Array.of(1, 2, 3, 4000, V - 1);
    const a = await m.predict(ids, { batch: 1 });
    const b = await ref.predict(ids, { batch: 1 });
    expect(a.length).toBe(5 * V);
    expect(a.every((x) => Number.isFinite(x))).toBe(true);
    expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))).toBe(true);
  });

  it("an abort midway rejects with the signal's reason and leaves nothing in the core", async () => {
    const before = await memory();
    const controller = new AbortController();
    const reason = new Error("stopped by the test");
    let loadedAtAbort = 0;
    const err = await LanguageModel.fromPretrained(
      { "config.json": config, "model.safetensors": file },
      {
        signal: controller.signal,
        onProgress: ({ file: name, loaded }) => {
          if (name === "model.safetensors" && loaded >= file.length / 3 && !controller.signal.aborted) {
            loadedAtAbort = loaded;
            controller.abort(reason);
          }
        },
      },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBe(reason);
    expect(loadedAtAbort).toBeGreaterThan(0);
    expect(loadedAtAbort).toBeLessThan(file.length);
    const after = await memory();
    expect(after.models.length).toBe(before.models.length);
    // The partly written model is freed with its loader: what malloc holds is back where it was.
    expect(Math.abs(after.heapUsedBytes - before.heapUsedBytes)).toBeLessThan(1 << 20);
    // A refusal midway (a file cut short) leaves nothing either, and says so.
    const cut = file.subarray(0, file.length - 1000);
    await expect(LanguageModel.fromPretrained({ "config.json": config, "model.safetensors": cut })).rejects.toThrow(/truncated/);
    const end = await memory();
    expect(end.models.length).toBe(before.models.length);
    expect(Math.abs(end.heapUsedBytes - before.heapUsedBytes)).toBeLessThan(1 << 20);
  });
  it('weights: "keep" on a BF16 file: the wasm heap and JS buffers grow by at most 1.3x the half-precision weights', async () => {
    // The same GPT-2 in BF16 (54 MB): kept, its matrices are never float32 anywhere, so the load's peak is about the
    // kept weights, half the float32 ones; converted (the default) it would be the float32 weights.
    const half = gpt2File("BF16");
    const { model, used, js, usedPeak } = await measureLoad((sample) =>
      LanguageModel.fromPretrained({ "config.json": config, "model.safetensors": half }, { onProgress: sample, weights: "keep" }),
    );
    using m = model;
    const kept = (await m.memory()).parameters;
    const f32 = 4 * m.numParameters();
    expect(kept).toBeLessThan(0.51 * f32); // the matrices in 2 bytes; positions, biases and norms in 4
    console.log(
      `pretrained-memory keep: kept weights ${kept} bytes (float32 ${f32}, file ${half.length}); wasm heap: ${used} ` +
        `bytes allocated (${(used / kept).toFixed(2)}x; ${usedPeak} at the peak sampled between pieces); other JS ` +
        `buffers at the peak: ${js} (${(js / kept).toFixed(2)}x)`,
    );
    expect(used).toBeGreaterThanOrEqual(kept * 0.95);
    expect(usedPeak + js).toBeLessThanOrEqual(1.3 * kept);
    expect(usedPeak + js).toBeLessThan(0.7 * f32);
    // The model the float32 load quantized to bf16 gives, bit for bit.
    using ref = await LanguageModel.importPretrained(config, half);
    await ref.quantize({ weights: "bf16" });
    const ids = Int32Array.of(1, 2, 3, 4000, V - 1);
    const a = await m.predict(ids, { batch: 1 });
    const b = await ref.predict(ids, { batch: 1 });
    expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))).toBe(true);
  });
});
