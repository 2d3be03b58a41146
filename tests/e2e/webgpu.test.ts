// WebGPU end to end in headless Chromium (SwiftShader: a correctness check, not a speed one). The same
// script runs in two pages, one on init({ backend: "webgpu" }) and one on "wasm", with the same seeds; the
// numbers must agree: each model's logits within 1e-5 (relative, of max(1, |x|)), 50 training steps within
// 1e-4 of the wasm losses, greedy generation the same tokens, and a checkpoint saved on the GPU loads in the
// wasm core and gives its logits. Then the fallbacks: "auto" on a software adapter runs the wasm core and
// says why; "webgpu" on a page that is not cross-origin isolated is refused naming the headers; a device
// loss rejects the call in flight and the model goes on training on the wasm core. LoRA adapters (a float32 and an
// int8 base) train on the GPU within the same 1e-4 of the wasm losses.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext, Page } from "playwright-core";
import { preview, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launch } from "./chromium.js";
import { expectClose, pageResult } from "./page.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

// Runs every model on the backend named in the query string and leaves the numbers in window.__result.
const PAGE = `<!doctype html>
<meta charset="utf-8">
<link rel="icon" href="data:,">
<script type="module">
  import { CharTokenizer, checkBackend, Classifier, info, init, LanguageModel, Seq2Seq } from "./pkg/browser.js";
  import { backend as coreBackend } from "./pkg/runtime.js";
  const q = new URLSearchParams(location.search);
  const result = { warnings: [] };
  const warn = console.warn;
  console.warn = (...a) => { result.warnings.push(a.join(" ")); warn(...a); };
  const arr = (x) => Array.from(x);
  // Fixed pseudo-random ids in [lo, hi).
  const ids = (n, lo, hi, seed) => { let s = seed >>> 0; const out = new Int32Array(n);
    for (let i = 0; i < n; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; out[i] = lo + (s >>> 8) % (hi - lo); } return out; };
  try {
    const mode = q.get("mode");
    if (mode === "models") {
      result.info = await init({ backend: q.get("backend"), relaxedSimd: false });
      // LanguageModel: pre-LN GELU, learned positions; ragged sizes (17 positions, 23 tokens, 3 rows).
      const lm = await LanguageModel.create({ vocabSize: 23, context: 17, dModel: 32, heads: 4, layers: 2, dFF: 48, seed: 3, lr: 3e-3, dropout: 0 });
      const B = 3, T = 17, x = ids(B * T, 0, 23, 1), y = ids(B * T, 0, 23, 2);
      result.lmLogits = arr(await lm.predict(x, { batch: B }));
      result.lmAttention = arr(await lm.attention({ layer: 1, head: 2 }));
      result.lmEval = await lm.evaluate(x, y, { batch: B });
      result.lmLosses = [];
      for (let i = 0; i < 50; i++) result.lmLosses.push((await lm.trainStep(x, y, { batch: B })).loss);
      result.lmLogitsAfter = arr(await lm.predict(x, { batch: B }));
      result.lmGreedy = arr(await lm.generate(Int32Array.of(1, 2, 3), { maxTokens: 12, temperature: 0 }));
      result.lmGreedyNoCache = arr(await lm.generate(Int32Array.of(1, 2, 3), { maxTokens: 12, temperature: 0, useCache: false }));
      result.lmStream = [];
      for await (const t of lm.stream(Int32Array.of(1, 2, 3), { maxTokens: 12, temperature: 0 })) result.lmStream.push(t);
      result.lmSampled = arr(await lm.generate(Int32Array.of(4, 5), { maxTokens: 10, temperature: 0.8, topK: 5, seed: 9 }));
      // The checkpoint with a char tokenizer of 19 letters (+ 4 specials = the 23 ids), for the qkv tool.
      const tok = await CharTokenizer.fromText("abcdefghijklmnopqrs");
      result.tokSize = tok.size;
      result.lmGreedyText = await tok.decode(await lm.generate(await tok.encode("abc"), { maxTokens: 12, temperature: 0 }));
      result.lmSaved = arr(await lm.save({ tokenizer: tok }));
      lm.dispose();
      // Seq2Seq: post-LN ReLU, sinusoidal positions, padding in the source.
      const s2s = await Seq2Seq.create({ srcVocab: 19, tgtVocab: 21, context: 12, dModel: 32, heads: 4, encoderLayers: 2, decoderLayers: 2, dFF: 48, seed: 5, lr: 3e-3, dropout: 0 });
      const src = ids(2 * 9, 3, 19, 3), tin = ids(2 * 7, 3, 21, 4), tout = ids(2 * 7, 3, 21, 5);
      src[7] = 0; src[8] = 0;
      result.s2sLogits = arr(await s2s.predict(src, tin, { batch: 2 }));
      result.s2sLosses = [];
      for (let i = 0; i < 50; i++) result.s2sLosses.push((await s2s.trainStep(src, tin, tout, { batch: 2 })).loss);
      result.s2sGreedy = arr(await s2s.generate(src.subarray(0, 9), { maxTokens: 8, bos: 1, eos: 2 }));
      result.s2sBeam = arr(await s2s.generate(src, { batch: 2, maxTokens: 8, bos: 1, eos: 2, beamWidth: 3 }));
      result.s2sEval = await s2s.evaluate(src, tin, tout, { batch: 2 });
      s2s.dispose();
      // Classifier: mean pooling over non-padding positions.
      const cls = await Classifier.create({ vocabSize: 29, context: 10, dModel: 32, heads: 4, layers: 2, dFF: 48, classes: 3, pooling: "mean", seed: 7, lr: 3e-3, dropout: 0 });
      const toks = ids(4 * 10, 1, 29, 6); toks[9] = 0; toks[19] = 0; toks[18] = 0;
      const labels = Int32Array.of(0, 2, 1, 2);
      result.clsLogits = arr(await cls.predict(toks, { batch: 4 }));
      result.clsLosses = [];
      for (let i = 0; i < 50; i++) result.clsLosses.push((await cls.trainStep(toks, labels, { batch: 4 })).loss);
      cls.dispose();
    } else if (mode === "lora") {
      // LoRA adapters on the models' ops: a float32 base with adapters on every target but q/k/v, and an int8 base (its tied
      // embedding packed too) with q, v, up and the head.
      result.info = await init({ backend: q.get("backend"), relaxedSimd: false });
      const config = { vocabSize: 23, context: 17, dModel: 32, heads: 4, layers: 2, dFF: 48, seed: 3, lr: 3e-3, dropout: 0 };
      const B = 3, x = ids(B * 17, 0, 23, 1), y = ids(B * 17, 0, 23, 2);
      const lm = await LanguageModel.create(config);
      result.loraBase = arr(await lm.predict(x, { batch: B }));
      await lm.addLora({ rank: 4, alpha: 8, targets: ["qkv", "out", "up", "down", "head"], seed: 1 });
      result.loraAdded = arr(await lm.predict(x, { batch: B }));
      result.loraLosses = [];
      for (let i = 0; i < 30; i++) result.loraLosses.push((await lm.trainStep(x, y, { batch: B })).loss);
      result.loraMemory = await lm.memory();
      // The adapters saved and loaded where the model is (on the GPU: through the executor's download and upload).
      result.loraTrained = arr(await lm.predict(x, { batch: B }));
      const other = await LanguageModel.create(config);
      await other.loadAdapter(await lm.saveAdapter());
      result.loraLoaded = arr(await other.predict(x, { batch: B }));
      other.dispose();
      await lm.removeLora();
      result.loraRemoved = arr(await lm.predict(x, { batch: B }));
      lm.dispose();
      const lq = await LanguageModel.create({ ...config, lr: 2e-2 });
      await lq.quantize({ weights: "int8" });
      await lq.addLora({ rank: 4, targets: ["q", "v", "up", "head"], seed: 2 });
      result.qloraLosses = [];
      for (let i = 0; i < 30; i++) result.qloraLosses.push((await lq.trainStep(x, y, { batch: B })).loss);
      lq.dispose();
    } else if (mode === "load") {
      // A checkpoint saved on the GPU, loaded in this page's core.
      result.info = await init({ backend: q.get("backend"), relaxedSimd: false });
      const bytes = Uint8Array.from(window.__checkpoint);
      const lm = await LanguageModel.load(bytes);
      result.lmLogits = arr(await lm.predict(ids(3 * 17, 0, 23, 1), { batch: 3 }));
    } else if (mode === "ops") {
      result.info = await init({ backend: "webgpu" });
      const t0 = performance.now();
      result.check = await checkBackend();
      result.checkSeconds = (performance.now() - t0) / 1000;
    } else if (mode === "refuse") {
      result.refused = await init({ backend: "webgpu" }).then(() => "resolved", (e) => e instanceof Error && e.message);
    } else if (mode === "auto") {
      result.info = await init({ backend: "auto" });
    } else if (mode === "lose") {
      result.info = await init({ backend: "webgpu" });
      const lm = await LanguageModel.create({ vocabSize: 11, context: 8, dModel: 16, heads: 2, layers: 1, seed: 1, lr: 1e-2 });
      const x = ids(8, 0, 11, 1), y = ids(8, 0, 11, 2);
      result.before = (await lm.trainStep(x, y)).loss;
      await (await coreBackend()).call("loseGpuDevice", null);
      result.lost = await lm.trainStep(x, y).then(() => "resolved", (e) => e instanceof Error && e.message);
      result.after = [];
      for (let i = 0; i < 20; i++) result.after.push((await lm.trainStep(x, y)).loss);
      result.infoAfter = await info();
      result.newModel = await LanguageModel.create({ vocabSize: 11, context: 8, dModel: 16, heads: 2, layers: 1 }).then((m) => "created", (e) => e.message);
    }
  } catch (e) {
    result.error = String((e && e.stack) || e);
  }
  window.__result = result;
</script>`;

type Numbers = Record<string, number[]>;
interface Result extends Numbers {}

let isolated: PreviewServer;
let plain: PreviewServer;
let context: BrowserContext;
let dir: string;

async function serve(headers: Record<string, string>): Promise<PreviewServer> {
  return preview({
    configFile: false,
    root: dir,
    logLevel: "warn",
    build: { outDir: "site" },
    preview: { host: "127.0.0.1", port: 0, headers },
  });
}

beforeAll(async () => {
  if (!existsSync(path.join(root, "web/dist/gpu-worker.js"))) throw new Error("web/dist is missing: run `npm run build:web` first");
  dir = mkdtempSync(path.join(os.tmpdir(), "qkv-webgpu-"));
  cpSync(path.join(root, "web/dist"), path.join(dir, "site/pkg"), { recursive: true });
  writeFileSync(path.join(dir, "site/index.html"), PAGE);
  isolated = await serve({ "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" });
  plain = await serve({});
  mkdirSync(path.join(dir, "profile"));
  context = await launch(path.join(dir, "profile"), undefined, { webgpu: true });
});

afterAll(async () => {
  await context?.close();
  await isolated?.close();
  await plain?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function run(query: string, server = isolated, before?: (page: Page) => Promise<unknown>): Promise<Record<string, unknown>> {
  return pageResult(context, `${server.resolvedUrls!.local[0]!}?${query}`, { timeout: 600_000, polling: 500, before });
}

describe("WebGPU backend", () => {
  let gpu: Record<string, unknown>;
  let wasm: Record<string, unknown>;

  it("runs every model on the GPU within float32 rounding of the wasm core", async () => {
    gpu = await run("mode=models&backend=webgpu");
    wasm = await run("mode=models&backend=wasm");
    const info = gpu.info as { backend: string; adapter: string };
    expect(info.backend).toBe("webgpu");
    expect(info.adapter).toMatch(/swiftshader/i);
    expect((wasm.info as { backend: string }).backend).toBe("wasm");
    for (const k of ["lmLogits", "lmAttention", "s2sLogits", "clsLogits"]) expectClose(gpu[k], wasm[k], 1e-5, k);
    for (const k of ["lmLosses", "s2sLosses", "clsLosses"]) {
      expectClose(gpu[k], wasm[k], 1e-4, k);
      const l = gpu[k] as number[];
      expect(l.at(-1)!, `${k} fell`).toBeLessThan(0.7 * l[0]!);
    }
    // After 50 Adam steps the two runs' weights differ by what rounding accumulated through training: Adam
    // turns a rounding-sized gradient into a step of about lr wherever v is tiny, so single logits drift apart
    // by ~1e-3 while the losses above stay within 1e-4. As a whole the trained models' logits agree to 1e-3.
    const ga = gpu.lmLogitsAfter as number[], wa = wasm.lmLogitsAfter as number[];
    const dist = Math.hypot(...ga.map((x, i) => x - wa[i]!)) / Math.hypot(...wa);
    expect(dist, "relative L2 distance of the trained logits").toBeLessThan(1e-3);
    const e = gpu.lmEval as { loss: number }, we = wasm.lmEval as { loss: number };
    expect(Math.abs(e.loss - we.loss)).toBeLessThan(1e-5 * we.loss);
    expect(gpu.lmGreedy).toEqual(wasm.lmGreedy);
    expect(gpu.lmGreedyNoCache).toEqual(gpu.lmGreedy);
    expect(gpu.s2sGreedy).toEqual(wasm.s2sGreedy);
    expect(gpu.lmStream).toEqual(gpu.lmGreedy);
    expect(gpu.lmSampled).toEqual(wasm.lmSampled); // the same seed samples the same tokens from logits 1e-5 apart
    expect(gpu.s2sBeam).toEqual(wasm.s2sBeam);
    const se = gpu.s2sEval as { loss: number; accuracy: number }, swe = wasm.s2sEval as { loss: number; accuracy: number };
    expect(Math.abs(se.loss - swe.loss)).toBeLessThan(1e-4 * swe.loss);
    expect(se.accuracy).toBe(swe.accuracy);
  }, 900_000);

  it("trains LoRA adapters on the GPU (float32 and int8 bases) within the tolerance of the wasm core", async () => {
    const g = await run("mode=lora&backend=webgpu");
    const w = await run("mode=lora&backend=wasm");
    expect((g.info as { backend: string }).backend).toBe("webgpu");
    expectClose(g.loraBase, w.loraBase, 1e-5, "base logits");
    // B = 0: the adapters add exact zeros until they train; removeLora gives the base back bit for bit.
    expect(g.loraAdded).toEqual(g.loraBase);
    expect(g.loraRemoved).toEqual(g.loraBase);
    // saveAdapter then loadAdapter into a model of the same config: the trained model's logits, bit for bit.
    expect(g.loraLoaded).toEqual(g.loraTrained);
    expect(w.loraLoaded).toEqual(w.loraTrained);
    for (const k of ["loraLosses", "qloraLosses"]) {
      expectClose(g[k], w[k], 1e-4, k);
      const l = g[k] as number[];
      expect(l.at(-1)!, `${k} fell`).toBeLessThan(0.8 * l[0]!);
    }
    expect(g.loraMemory).toMatchObject({ gradients: (w.loraMemory as { gradients: number }).gradients, optimizer: (w.loraMemory as { optimizer: number }).optimizer });
  }, 900_000);

  it("runs every op of the contract on the GPU within its bound of the wasm core's, over ragged shapes", async () => {
    const r = await run("mode=ops");
    const check = r.check as { backend: string; against: string; results: { name: string; error: number; tol: number; ok: boolean; detail?: string }[] };
    expect(check.backend).toBe("webgpu");
    expect(check.against).toBe("wasm");
    const groups = new Set(check.results.map((x) => x.name.split(" ")[0]));
    for (const g of ["copy_rows", "gemm", "linear", "layernorm", "bias_act", "dropout", "attention", "embedding", "mean_pool", "crossentropy", "adam", "gemm_quant", "dequantize_rows", "embedding_forward_quant"])
      expect(groups, g).toContain(g);
    const bad = check.results.filter((x) => !x.ok).map((x) => `${x.name}${x.detail} (error ${x.error}, tol ${x.tol})`);
    expect(bad).toEqual([]);
    console.log(`webgpu: ${check.results.length} op outputs checked against the wasm core in ${(r.checkSeconds as number).toFixed(1)} s`);
  }, 900_000);

  it("saves checkpoints that load in the wasm core and natively", async () => {
    const saved = gpu.lmSaved as number[];
    expect(gpu.tokSize).toBe(23);
    // Natively: the qkv tool continues the same prompt with the same tokens.
    const tool = path.join(root, "build/native/cpp/tools/qkv");
    if (!existsSync(tool)) throw new Error(`${tool} is missing: build the native preset first (cmake --build --preset native)`);
    const file = path.join(dir, "gpu.safetensors");
    writeFileSync(file, Uint8Array.from(saved));
    const out = execFileSync(tool, ["generate", "--ckpt", file, "--prompt", "abc", "--max-tokens", "12", "--temperature", "0"], { encoding: "utf8" });
    expect(out).toContain(gpu.lmGreedyText as string);
    const r = await run("mode=load&backend=wasm", isolated, (page) =>
      page.addInitScript((bytes) => Object.assign(window, { __checkpoint: bytes }), saved),
    );
    // The same weights on the two executors: float32 rounding apart, as the logits above.
    expectClose(r.lmLogits, gpu.lmLogitsAfter, 1e-5, "logits of the GPU's checkpoint in the wasm core");
  }, 300_000);

  it('falls back to the wasm core on "auto" with a software adapter, and says why', async () => {
    const r = await run("mode=auto");
    const info = r.info as { backend: string; fallbackReason: string };
    expect(info.backend).toBe("wasm");
    expect(info.fallbackReason).toMatch(/software one \(.*swiftshader.*\); the wasm core is faster/i);
    expect((r.warnings as string[]).some((w) => /running on the wasm core, not WebGPU: .*software/.test(w))).toBe(true);
  }, 300_000);

  it('refuses "webgpu" on a page that is not cross-origin isolated, naming the headers', async () => {
    const r = await run("mode=refuse", plain);
    expect(r.refused).toMatch(/needs the threaded build.*Cross-Origin-Opener-Policy: same-origin.*Cross-Origin-Embedder-Policy: require-corp/);
  }, 120_000);

  it("rejects the call in flight on a device loss, and the model trains on in the wasm core", async () => {
    const r = await run("mode=lose");
    expect(Number.isFinite(r.before as number)).toBe(true);
    expect(r.lost).toMatch(/webgpu: the GPU device was lost: .*; the model continues on the wasm core from its state at step 0/);
    const after = r.after as number[];
    expect(after.every(Number.isFinite)).toBe(true);
    expect(after.at(-1)!).toBeLessThan(after[0]!);
    expect(r.newModel).toBe("created"); // new models go to the wasm core
    expect(r.infoAfter).toMatchObject({ backend: "wasm", fallbackReason: expect.stringMatching(/the GPU device was lost/) });
  }, 300_000);
});
