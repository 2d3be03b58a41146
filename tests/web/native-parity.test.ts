// The same core on two targets: the WebAssembly build (through the npm package) must follow the native
// build's loss trajectory for the same config, weights seed and batch. build/native/native-trace.json is
// written by the native tool qkv_lm_trace (scripts/test.sh runs it). Native kernels use FMA and SIMD128
// has none, so the values agree to float32 rounding accumulated over 20 steps, not bit for bit.
//
// Checkpoints cross both ways: the native helper qkv_checkpoint_trace (tests/cpp/tools) saves a trained model
// of each kind with its logits on a probe batch, the package loads it and must give the same logits (to
// 1e-5); the package trains on, saves, and the native helper must read the file and give the package's
// logits. And a checkpoint from the `qkv train` tool carries its tokenizer, which the package decodes with;
// one the package saves with save({ tokenizer }) runs in `qkv generate`, writing the package's greedy text.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, Classifier, init, LanguageModel, Seq2Seq, Tokenizer, Trainer, checkpointMetadata } from "../../web/dist/node.js";

interface Trace {
  config: { vocabSize: number; context: number; dModel: number; heads: number; layers: number; dFF: number; seed: number; lr: number };
  batch: number;
  seq: number;
  inputs: number[];
  targets: number[];
  losses: number[];
  prompt: number[];
  greedy: number[];
}

const tracePath = new URL("../../build/native/native-trace.json", import.meta.url);
let trace: Trace;
let model: LanguageModel;

beforeAll(async () => {
  if (!existsSync(tracePath)) {
    throw new Error(
      "build/native/native-trace.json is missing: run ./build/native/tests/cpp/qkv_lm_trace > build/native/native-trace.json",
    );
  }
  trace = JSON.parse(readFileSync(tracePath, "utf8")) as Trace;
  await init({ threads: 2 });
  model = await LanguageModel.create(trace.config);
});
afterAll(() => model?.dispose());

describe("wasm vs native", () => {
  it("follows the native loss trajectory over 20 AdamW steps (relative difference < 1e-4)", async () => {
    const inputs = Int32Array.from(trace.inputs);
    const targets = Int32Array.from(trace.targets);
    const losses: number[] = [];
    for (let s = 0; s < trace.losses.length; s++) {
      losses.push((await model.trainStep(inputs, targets, { batch: trace.batch, seq: trace.seq })).loss);
    }
    const worst = Math.max(...losses.map((l, i) => Math.abs(l - trace.losses[i]) / Math.abs(trace.losses[i])));
    expect(worst, `wasm ${losses.join(", ")}\nnative ${trace.losses.join(", ")}`).toBeLessThan(1e-4);
    // And the trajectory is a real one: it fell.
    expect(trace.losses[trace.losses.length - 1]).toBeLessThan(trace.losses[0] - 0.5);
  });

  it("generates the same greedy continuation after training", async () => {
    const out = await model.generate(Int32Array.from(trace.prompt), { maxTokens: trace.greedy.length, temperature: 0 });
    expect(Array.from(out)).toEqual(trace.greedy);
  });
});

const nativeDir = fileURLToPath(new URL("../../build/native/", import.meta.url));
const checkpointTrace = path.join(nativeDir, "tests/cpp/qkv_checkpoint_trace");
const qkvTool = path.join(nativeDir, "cpp/tools/qkv");

/** Runs a native program; its stdout. */
function native(program: string, args: string[], cwd?: string): string {
  if (!existsSync(program)) {
    throw new Error(`${program} is missing: build the native targets (cmake --preset native && cmake --build --preset native)`);
  }
  return execFileSync(program, args, { encoding: "utf8", cwd, timeout: 120_000 });
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

interface Probe {
  kind: "language_model" | "seq2seq" | "classifier";
  batch: number;
  seq?: number;
  inputs?: number[];
  targets?: number[];
  src?: number[];
  tgtIn?: number[];
  tgtOut?: number[];
  tokens?: number[];
  labels?: number[];
  logits: number[];
}

type AnyModel = LanguageModel | Seq2Seq | Classifier;
const i32 = (a: number[] | undefined) => Int32Array.from(a!);

/** The package's logits on a probe batch, and one training step on it. */
const run = {
  predict(m: AnyModel, p: Probe): Promise<Float32Array> {
    if (m instanceof LanguageModel) return m.predict(i32(p.inputs), { batch: p.batch });
    if (m instanceof Seq2Seq) return m.predict(i32(p.src), i32(p.tgtIn), { batch: p.batch });
    return m.predict(i32(p.tokens), { batch: p.batch });
  },
  async train(m: AnyModel, p: Probe): Promise<void> {
    if (m instanceof LanguageModel) await m.trainStep(i32(p.inputs), i32(p.targets), { batch: p.batch });
    else if (m instanceof Seq2Seq) await m.trainStep(i32(p.src), i32(p.tgtIn), i32(p.tgtOut), { batch: p.batch });
    else await m.trainStep(i32(p.tokens), i32(p.labels), { batch: p.batch });
  },
};

describe("checkpoints: native -> wasm -> native", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), "qkv-ckpt-"));
    native(checkpointTrace, ["write", dir]);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const kinds = [
    ["language_model", LanguageModel],
    ["seq2seq", Seq2Seq],
    ["classifier", Classifier],
  ] as const;

  for (const [kind, cls] of kinds) {
    it(`${kind}: a native checkpoint gives the native logits in wasm, and a wasm checkpoint the wasm logits natively (1e-5)`, async () => {
      const probe = JSON.parse(readFileSync(path.join(dir, `${kind}.json`), "utf8")) as Probe;
      const bytes = readFileSync(path.join(dir, `${kind}.safetensors`));
      using m = await (cls as { load(b: Uint8Array): Promise<AnyModel> }).load(bytes);
      expect((await checkpointMetadata(bytes))["qkv.model"]).toBe(kind);
      const logits = await run.predict(m, probe);
      const there = maxAbsDiff(logits, probe.logits);
      // The trained model is not at its initialisation: a real comparison, not of near-zero logits.
      expect(Math.max(...probe.logits.map(Math.abs))).toBeGreaterThan(0.1);
      expect(there, `native -> wasm (${kind})`).toBeLessThan(1e-5);

      // Train on in wasm (the optimizer state came along), save, and let the native build read it.
      await run.train(m, probe);
      await run.train(m, probe);
      const mine = await run.predict(m, probe);
      expect(maxAbsDiff(mine, logits)).toBeGreaterThan(1e-4);
      const file = path.join(dir, `${kind}.from-wasm.safetensors`);
      writeFileSync(file, await m.save());
      const back = JSON.parse(native(checkpointTrace, ["logits", kind, file])) as { logits: number[] };
      const backDiff = maxAbsDiff(mine, back.logits);
      console.log(`${kind}: max |logit difference| native -> wasm ${there.toExponential(2)}, wasm -> native ${backDiff.toExponential(2)}`);
      expect(backDiff, `wasm -> native (${kind})`).toBeLessThan(1e-5);
    });
  }

  it("the configs cross intact (non-default choices of each kind)", async () => {
    using lm = await LanguageModel.load(readFileSync(path.join(dir, "language_model.safetensors")));
    expect(lm.config).toMatchObject({ tieHead: false, positions: "sinusoidal", dModel: 24, heads: 3, layers: 2, dFF: 40 });
    using s2s = await Seq2Seq.load(readFileSync(path.join(dir, "seq2seq.safetensors")));
    expect(s2s.config).toMatchObject({ norm: "pre", activation: "gelu", labelSmoothing: 0.1, encoderLayers: 2, decoderLayers: 1 });
    using c = await Classifier.load(readFileSync(path.join(dir, "classifier.safetensors")));
    expect(c.config).toMatchObject({ pooling: "mean", head: "linear", classes: 3 });
  });
});

describe("a checkpoint from the native `qkv train` tool", () => {
  let dir: string;
  let bytes: Uint8Array;
  const text = "the quick brown fox jumps over the lazy dog. ".repeat(60);
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), "qkv-train-"));
    writeFileSync(path.join(dir, "text.txt"), text);
    // The tiny preset with a higher learning rate: 100 steps learn the sentence (about 3 s on 2 cores).
    writeFileSync(path.join(dir, "config.json"), JSON.stringify({ preset: "tiny", optimizer: { lr: 0.005 } }));
    const args = ["train", "--data", "text.txt", "--config", "config.json", "--steps", "100", "--out", "lm.safetensors"];
    native(qkvTool, [...args, "--threads", "2"], dir);
    bytes = readFileSync(path.join(dir, "lm.safetensors"));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("carries a tokenizer the package reads byte for byte, and the package generates what the tool generates", async () => {
    const meta = await checkpointMetadata(bytes);
    const tok = await Tokenizer.fromCheckpoint(bytes);
    expect(tok).toBeInstanceOf(CharTokenizer);
    expect(JSON.stringify(tok)).toBe(meta["qkv.tokenizer"]);
    using lm = await LanguageModel.load(bytes);
    expect(lm.config.vocabSize).toBe(tok.size);
    const prompt = "the quick";
    const ids = await lm.generate(await tok.encode(prompt), { maxTokens: 30, temperature: 0 });
    const mine = await tok.decode(ids);
    const theirs = native(qkvTool, ["generate", "--ckpt", "lm.safetensors", "--prompt", prompt, "--max-tokens", "30", "--temperature", "0", "--threads", "2"], dir);
    // The tool prints the prompt, the new text and a newline.
    expect(prompt + mine + "\n").toBe(theirs);
    // It learned the sentence, so greedy decoding is far from ties: the continuation is the text's.
    expect(text).toContain(prompt + mine);
    expect(mine.length).toBe(30);
    await expect(Tokenizer.fromCheckpoint(bytes, "qkv.tokenizer.target")).rejects.toThrow(/the checkpoint has no "qkv.tokenizer.target" metadata \(it holds: .*qkv\.tokenizer/);
  });
});

describe("a checkpoint the package saves with its tokenizer runs in the native `qkv generate`", () => {
  let dir: string;
  const text = "the quick brown fox jumps over the lazy dog. ".repeat(60);
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), "qkv-save-tok-"));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("save({ tokenizer }) is all `qkv generate` needs, and it writes the package's greedy text", async () => {
    const tok = await CharTokenizer.fromText(text);
    const ids = await tok.encode(text);
    // Small enough to train in a few seconds, long enough to learn the sentence: greedy decoding is then
    // far from ties, so wasm (no FMA) and native pick the same tokens.
    using lm = await LanguageModel.create({ vocabSize: tok.size, context: 32, dModel: 48, heads: 4, layers: 2, lr: 5e-3, seed: 3 });
    const trainer = new Trainer(lm, { data: ids, batchSize: 8, seed: 1 });
    await trainer.fit({ steps: 150 });
    const file = path.join(dir, "from-package.safetensors");
    writeFileSync(file, await lm.save({ tokenizer: tok, metadata: { "app.trained-in": "node" } }));

    const prompt = "the quick";
    const mine = await tok.decode(await lm.generate(await tok.encode(prompt), { maxTokens: 40, temperature: 0 }));
    const theirs = native(qkvTool, ["generate", "--ckpt", file, "--prompt", prompt, "--max-tokens", "40", "--temperature", "0", "--threads", "2"]);
    // The tool prints the prompt, the new text and a newline.
    expect(theirs).toBe(prompt + mine + "\n");
    expect(text).toContain(prompt + mine);
    expect(mine.length).toBe(40);
    // `qkv info` reads the same file: the tokenizer, the step the package trained to, the caller's key.
    const info = native(qkvTool, ["info", "--ckpt", file]);
    expect(info).toMatch(new RegExp(`tokenizer\\s+char, ${tok.size} tokens`));
    expect(info).toMatch(/step\s+150 \(with optimizer state\)/);
    expect(info).toMatch(/app\.trained-in\s+node/);
  });
});
