// model.quantize in the npm package: the formats it packs, the memory it frees, inference through the packed
// weights, the refusals (training, twice, an unknown format), quantized checkpoints round-tripping in the package,
// and crossing to the native build both ways: a checkpoint the native `qkv quantize` wrote generates in the package
// the tokens `qkv generate` prints for it, and one the package quantized and saved generates natively the
// package's tokens.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, init, LanguageModel } from "../../web/dist/node.js";
import { PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

await init({ threads: 2 });
const NO_SPECIALS = { specials: { pad: false, bos: false, eos: false, unk: false } };
const tok = await CharTokenizer.fromText(PATTERN_TEXT, NO_SPECIALS);
const data = await tok.encode(PATTERN_TEXT);
const CONFIG = { vocabSize: tok.size, context: 16, dModel: 32, heads: 4, layers: 2, lr: 1e-2, seed: 5 };
const PROMPT = Int32Array.from(data.slice(0, 5));

let trained: Uint8Array; // a float32 checkpoint, trained a little so that generation is not uniform noise
const dir = mkdtempSync(path.join(os.tmpdir(), "qkv-quantize-"));

beforeAll(async () => {
  const m = await LanguageModel.create(CONFIG);
  const random = rng(3);
  for (let i = 0; i < 30; i++) {
    const { inputs, targets } = sampleBatch(data, 4, 16, random);
    await m.trainStep(inputs, targets, { batch: 4, seq: 16 });
  }
  trained = await m.save({ optimizer: false });
  m.dispose();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const MATRICES = ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.out_proj.weight", "layers.0.linear1.weight", "layers.0.linear2.weight"];

describe("LanguageModel.quantize", () => {
  it("packs every Linear weight and the tied embedding, and the weights' bytes fall", async () => {
    for (const [weights, ratio] of [["int8", 3], ["q4", 4.5], ["f16", 1.9], ["bf16", 1.9]] as const) {
      const m = await LanguageModel.load(trained);
      const before = (await m.memory()).parameters;
      const formats = await m.quantize({ weights });
      for (const name of [...MATRICES, "tok_emb.weight"]) expect(formats[name]).toBe(weights);
      expect(Object.keys(formats)).toHaveLength(9); // 4 per layer, and the embedding (the tied head)
      const after = await m.memory();
      expect(after.parameters).toBeLessThan(before / ratio + 4 * 2000); // the float32 norms and positions remain
      expect(after.gradients).toBe(0);
      const out = await m.generate(PROMPT, { maxTokens: 8, temperature: 0 });
      expect(out.length).toBe(8);
      m.dispose();
    }
  });

  it("keeps the embedding float32 with embedding: false", async () => {
    const m = await LanguageModel.load(trained);
    const formats = await m.quantize({ weights: "q4", embedding: false });
    expect(formats["tok_emb.weight"]).toBeUndefined();
    expect(Object.keys(formats)).toHaveLength(8);
    m.dispose();
  });

  it("refuses training, a second quantize and unknown formats with Errors, the model still usable", async () => {
    const m = await LanguageModel.load(trained);
    await expect(m.quantize({ weights: "int3" as "int8" })).rejects.toThrow(/options\.weights = "int3" is not a quantized format: expected "int8", "q4", "f16" or "bf16"$/);
    await expect(m.quantize({ weights: "f32" as "int8" })).rejects.toThrow(/options\.weights = "f32" is not a quantized format: expected "int8", "q4", "f16" or "bf16" \(float32 is what the model holds/);
    await expect(m.quantize(null as unknown as { weights: "int8" })).rejects.toThrow(/options must be an object/);
    await expect(m.quantize({ weights: "int8", embedding: 1 as unknown as boolean })).rejects.toThrow(/options\.embedding must be true or false/);
    await m.quantize({ weights: "int8" });
    const logits = await m.predict(PROMPT, { batch: 1, seq: 5 });
    await expect(m.quantize({ weights: "q4" })).rejects.toThrow(/already quantized \(int8\)/);
    const { inputs, targets } = sampleBatch(data, 2, 8, rng(1));
    await expect(m.trainStep(inputs, targets, { batch: 2, seq: 8 })).rejects.toThrow(/quantized \(int8.*LoRA/);
    expect(Array.from(await m.predict(PROMPT, { batch: 1, seq: 5 }))).toEqual(Array.from(logits));
    // The formats' metadata key is the checkpoint's own, on a quantized model and a float32 one alike.
    await expect(m.save({ metadata: { "qkv.quantized": "{}" } })).rejects.toThrow(/metadata key "qkv\.quantized" is reserved/);
    const fp32 = await LanguageModel.load(trained);
    await expect(fp32.save({ metadata: { "qkv.quantized": "{}" } })).rejects.toThrow(/metadata key "qkv\.quantized" is reserved/);
    fp32.dispose();
    m.dispose();
  });

  it("saves a quantized checkpoint that loads quantized, with the same bytes and logits", async () => {
    const m = await LanguageModel.load(trained);
    await m.quantize({ weights: "q4" });
    const bytes = await m.save();
    const again = await LanguageModel.load(bytes);
    expect(await again.memory()).toEqual(await m.memory());
    expect(await again.save()).toEqual(bytes); // before a forward pass: the file counts them (qkv.passes)
    expect(Array.from(await again.predict(PROMPT, { batch: 1, seq: 5 }))).toEqual(Array.from(await m.predict(PROMPT, { batch: 1, seq: 5 })));
    // Streamed in pieces, as from a download.
    const streamed = await LanguageModel.load(new Blob([bytes]));
    expect(Array.from(await streamed.generate(PROMPT, { maxTokens: 10, temperature: 0 }))).toEqual(
      Array.from(await m.generate(PROMPT, { maxTokens: 10, temperature: 0 })),
    );
    for (const x of [m, again, streamed]) x.dispose();
  });
});

const qkvTool = fileURLToPath(new URL("../../build/native/cpp/tools/qkv", import.meta.url));

function native(args: string[]): string {
  if (!existsSync(qkvTool)) throw new Error(`${qkvTool} is missing: build the native tool (cmake --build --preset native --target qkv)`);
  return execFileSync(qkvTool, args, { encoding: "utf8", cwd: dir, timeout: 120_000 });
}

/** `qkv generate --prompt-ids` on a checkpoint: the new ids it prints. */
function nativeGreedy(file: string, tokens: number): number[] {
  const out = native(["generate", "--ckpt", file, "--prompt-ids", Array.from(PROMPT).join(","), "--max-tokens", String(tokens), "--temperature", "0", "--seed", "1", "--threads", "2"]);
  return out.trim().split(/\s+/).map(Number);
}

describe("quantized checkpoints across the native build", () => {
  it("generates natively quantized checkpoints' native tokens, and the package's quantized ones natively", { timeout: 60_000 }, async () => {
    writeFileSync(path.join(dir, "fp32.safetensors"), trained);
    for (const weights of ["int8", "q4", "f16", "bf16"] as const) {
      native(["quantize", "--weights", weights, "fp32.safetensors", `native_${weights}.safetensors`]);
      const theirs = nativeGreedy(`native_${weights}.safetensors`, 12);
      const m = await LanguageModel.load(readFileSync(path.join(dir, `native_${weights}.safetensors`)));
      expect(Array.from(await m.generate(PROMPT, { maxTokens: 12, temperature: 0 }))).toEqual(theirs);
      m.dispose();

      const p = await LanguageModel.load(trained);
      await p.quantize({ weights });
      const bytes = await p.save();
      writeFileSync(path.join(dir, `package_${weights}.safetensors`), bytes);
      expect(nativeGreedy(`package_${weights}.safetensors`, 12)).toEqual(Array.from(await p.generate(PROMPT, { maxTokens: 12, temperature: 0 })));
      p.dispose();
    }
  });
});

/** The largest |a - b| over the largest |b|. */
function maxRel(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    scale = Math.max(scale, Math.abs(b[i]!));
    worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  }
  return worst / scale;
}

describe("int8 activations (integer dot products while decoding)", () => {
  it("moves decoding's logits by the activations' rounding, travels in the checkpoint, and switches off", async () => {
    for (const weights of ["int8", "q4"] as const) {
      const a8 = await LanguageModel.load(trained);
      await a8.quantize({ weights, activations: "int8" });
      const f32 = await LanguageModel.load(trained);
      await f32.quantize({ weights });
      // 5 rows (up to 8 take the integer path): near the float32 activations' logits, not equal to them.
      const got = await a8.predict(PROMPT, { batch: 1, seq: 5 });
      const want = await f32.predict(PROMPT, { batch: 1, seq: 5 });
      const rel = maxRel(got, want);
      expect(rel).toBeLessThan(3e-2);
      expect(rel).toBeGreaterThan(1e-6);
      // Saved with the checkpoint: loaded (whole and streamed), the same logits bit for bit.
      const bytes = await a8.save();
      for (const again of [await LanguageModel.load(bytes), await LanguageModel.load(new Blob([bytes]))]) {
        expect(Array.from(await again.predict(PROMPT, { batch: 1, seq: 5 }))).toEqual(Array.from(got));
        again.dispose();
      }
      await a8.setQuantActivations("f32");
      expect(Array.from(await a8.predict(PROMPT, { batch: 1, seq: 5 }))).toEqual(Array.from(want));
      a8.dispose();
      f32.dispose();
    }
  });

  it("rejects what it cannot do with Errors naming the argument, changing nothing", async () => {
    const m = await LanguageModel.load(trained);
    const logits = await m.predict(PROMPT, { batch: 1, seq: 5 });
    await expect(m.quantize({ weights: "q4", activations: "int4" as "int8" })).rejects.toThrow(/options\.activations = "int4" is not an activation format: expected "int8" or "f32"/);
    await expect(m.quantize({ weights: "f16", activations: "int8" })).rejects.toThrow(/activations = int8 needs int8 or q4 weights \(integer dot products\), not f16/);
    await expect(m.setQuantActivations("int8")).rejects.toThrow(/activations = int8 needs int8 or q4 weights, and this model has none/);
    await expect(m.setQuantActivations(7 as unknown as "int8")).rejects.toThrow(/activations must be a string/);
    expect(Array.from(await m.predict(PROMPT, { batch: 1, seq: 5 }))).toEqual(Array.from(logits));
    expect(await m.quantize({ weights: "q4" })).toHaveProperty(["tok_emb.weight"], "q4"); // still float32 until now
    m.dispose();
  });

  it("generates a native `qkv quantize --activations int8` checkpoint's native tokens", { timeout: 60_000 }, async () => {
    writeFileSync(path.join(dir, "fp32.safetensors"), trained);
    native(["quantize", "--weights", "q4", "--activations", "int8", "fp32.safetensors", "native_q4_a8.safetensors"]);
    const m = await LanguageModel.load(readFileSync(path.join(dir, "native_q4_a8.safetensors")));
    expect(Array.from(await m.generate(PROMPT, { maxTokens: 12, temperature: 0 }))).toEqual(nativeGreedy("native_q4_a8.safetensors", 12));
    m.dispose();
  });
});
