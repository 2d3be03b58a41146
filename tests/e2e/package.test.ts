// The browser entry without a bundler: web/dist served as plain ES modules, the build files loaded from
// another folder through init({ wasmPath }) (as from a CDN), errors crossing the Worker as Errors.
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext } from "playwright-core";
import { launch } from "./chromium.js";
import { preview, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

const PAGE = `<!doctype html>
<meta charset="utf-8">
<link rel="icon" href="data:,">
<script type="module">
  import { CharTokenizer, Classifier, init, LanguageModel, memory, Seq2Seq, Trainer } from "./pkg/browser.js";
  const result = {};
  try {
    // vite preview answers a missing file with its index.html (HTTP 200), as many static hosts do.
    await init({ wasmPath: "./missing/" }).catch((e) => { result.badPath = e.message; });
    // The plain SIMD128 build, asked for by name (the Vite app and the demo run the relaxed one).
    result.info = await init({ wasmPath: new URL("./cdn/", location.href), relaxedSimd: false });
    const m = await LanguageModel.create({ vocabSize: 5, context: 4, dModel: 8, heads: 2, layers: 1, lr: 1e-2 });
    const x = Int32Array.of(0, 1, 2, 3), y = Int32Array.of(1, 2, 3, 4);
    result.losses = [];
    for (let i = 0; i < 20; i++) result.losses.push((await m.trainStep(x, y)).loss);
    result.outOfRange = await m.trainStep(Int32Array.of(0, 9), Int32Array.of(1, 2)).then(() => "resolved", (e) => e instanceof Error && e.message);
    result.wrongType = await m.trainStep("ab", y).then(() => "resolved", (e) => e instanceof TypeError && e.message);
    result.wrongConfig = await LanguageModel.create({ vocabSize: "5", context: 4, dModel: 8, heads: 2, layers: 1 }).then(() => "resolved", (e) => e instanceof TypeError && e.message);
    result.generated = Array.from(await m.generate(Int32Array.of(0), { maxTokens: 6, temperature: 0 }));
    m.dispose();
    result.disposed = await m.evaluate(x, y).then(() => "resolved", (e) => e.message);
    // nonFinite: "skip" through the Worker: an lr that overflows the weights, then a step that is skipped.
    const sk = await LanguageModel.create({ vocabSize: 5, context: 4, dModel: 8, heads: 2, layers: 1, nonFinite: "skip" });
    await sk.setLearningRate(1e30);
    result.skip = [];
    for (let i = 0; i < 2; i++) {
      const s = await sk.trainStep(x, y);
      result.skip.push([Number.isFinite(s.loss), s.skipped, s.skippedSteps]);
    }
    sk.dispose();
    result.skipBad = await LanguageModel.create({ vocabSize: 5, context: 4, dModel: 8, heads: 2, layers: 1, nonFinite: "sometimes" }).then(() => "resolved", (e) => e instanceof Error && e.message);

    // The rest of the API through the Worker: arrays back as transferables, errors as Errors, the worker alive.
    const tok = await CharTokenizer.fromText("abcd");
    result.tokJson = JSON.stringify(tok);
    result.roundTrip = await tok.decode(await tok.encode("dcba", { bos: true }));
    const lm = await LanguageModel.create({ vocabSize: tok.size, context: 4, dModel: 8, heads: 2, layers: 1, lr: 1e-2 });
    const ids = await tok.encode("abcd");
    await lm.trainStep(ids, Int32Array.of(5, 6, 7, 4));
    const logits = await lm.predict(ids);
    result.logits = [logits.constructor.name, logits.length];
    result.attention = (await lm.attention({ layer: 0, head: 1 })).length;
    const bytes = await lm.save();
    result.saved = [bytes.constructor.name, bytes.length > 1000];
    result.truncated = await LanguageModel.load(bytes.subarray(0, 100)).then(() => "resolved", (e) => e.message);
    const again = await LanguageModel.load(bytes);
    const logits2 = await again.predict(ids);
    result.sameLogits = logits2.length === logits.length && logits2.every((v, i) => v === logits[i]);
    again.dispose();
    const s2s = await Seq2Seq.create({ srcVocab: 6, tgtVocab: 6, context: 6, dModel: 8, heads: 2, encoderLayers: 1, decoderLayers: 1 });
    result.s2sLoss = (await s2s.trainStep(Int32Array.of(3, 4, 5), Int32Array.of(1, 5, 4), Int32Array.of(5, 4, 2))).loss;
    result.s2sGenerated = Array.from(await s2s.generate(Int32Array.of(3, 4, 5), { maxTokens: 4, bos: 1, eos: 2 }));
    result.s2sCross = (await s2s.attention({ layer: 0, head: 0, kind: "encoder" })).length;
    result.s2sBad = await s2s.attention({ layer: 0, head: 0, kind: "cross" }).then(() => "resolved", (e) => e.message);
    const cls = await Classifier.create({ vocabSize: 6, context: 4, dModel: 8, heads: 2, layers: 1, classes: 3 });
    const examples = [0, 1, 2, 0, 1, 2].map((label) => ({ tokens: Int32Array.of(1, label + 2), label }));
    const controller = new AbortController();
    result.aborted = await new Trainer(cls, { data: examples, batchSize: 3 })
      .fit({ steps: 10, signal: controller.signal, onStep: ({ step }) => { if (step === 2) controller.abort(); } })
      .then(() => "resolved", (e) => e.name);
    // Two models at once, interleaved in the one worker.
    const [a, b] = await Promise.all([
      new Trainer(lm, { data: Int32Array.of(4, 5, 6, 7, 4, 5, 6, 7, 4, 5), batchSize: 2, seqLen: 4 }).fit({ steps: 5 }),
      new Trainer(cls, { data: examples, batchSize: 3 }).fit({ steps: 5 }),
    ]);
    result.concurrent = [a.step, b.step, Number.isFinite(a.loss) && Number.isFinite(b.loss)];
    result.clsLogits = (await cls.predict(Int32Array.of(1, 2, 1, 3), { batch: 2 })).length;
    result.memory = (await memory()).models.map((x) => x.kind);
    s2s.dispose();
    cls.dispose();
    lm.dispose();
    result.memoryAfter = (await memory()).models.map((x) => x.kind);
  } catch (e) {
    result.error = String(e && e.stack || e);
  }
  window.__result = result;
</script>`;

let server: PreviewServer;
let context: BrowserContext;
let dir: string;

beforeAll(async () => {
  if (!existsSync(path.join(root, "web/dist/browser.js"))) throw new Error("web/dist is missing: run `npm run build:web` first");
  dir = mkdtempSync(path.join(os.tmpdir(), "qkv-pkg-"));
  cpSync(path.join(root, "web/dist"), path.join(dir, "site/pkg"), { recursive: true });
  // The build files only under cdn/: the default location (pkg/wasm/) is removed, so only wasmPath can work.
  cpSync(path.join(dir, "site/pkg/wasm"), path.join(dir, "site/cdn"), { recursive: true });
  rmSync(path.join(dir, "site/pkg/wasm"), { recursive: true });
  writeFileSync(path.join(dir, "site/index.html"), PAGE);
  server = await preview({
    configFile: false,
    root: dir,
    logLevel: "warn",
    build: { outDir: "site" },
    preview: {
      host: "127.0.0.1",
      port: 0,
      headers: { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" },
    },
  });
  mkdirSync(path.join(dir, "profile"));
  context = await launch(path.join(dir, "profile"));
});

afterAll(async () => {
  await context?.close();
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("browser entry without a bundler", () => {
  it("loads from wasmPath in a Worker, trains every model, and rejects bad input with the core's Error", async () => {
    const page = context.pages()[0] ?? (await context.newPage());
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(server.resolvedUrls!.local[0]!);
    await page.waitForFunction(() => "__result" in window, null, { timeout: 60_000 });
    const r = (await page.evaluate(() => (window as unknown as { __result: Record<string, unknown> }).__result)) as {
      error?: string;
      badPath: string;
      info: { threaded: boolean; threads: number; relaxedSimd: boolean; backend: string; fallbackReason?: string };
      losses: number[];
      outOfRange: string;
      wrongType: string;
      wrongConfig: string;
      generated: number[];
      disposed: string;
      skip: [boolean, boolean, number][];
      skipBad: string;
      tokJson: string;
      roundTrip: string;
      logits: [string, number];
      attention: number;
      saved: [string, boolean];
      truncated: string;
      sameLogits: boolean;
      s2sLoss: number;
      s2sGenerated: number[];
      s2sCross: number;
      s2sBad: string;
      aborted: string;
      concurrent: [number, number, boolean];
      clsLogits: number;
      memory: string[];
      memoryAfter: string[];
    };
    expect(r.error).toBeUndefined();
    expect(r.badPath).toMatch(/cannot load http:\/\/127\.0\.0\.1:\d+\/missing\/qkv-relaxed\.wasm \(not a WebAssembly module: got text\/html.*init\(\{ wasmPath \}\)/);
    expect(r.info.threaded).toBe(true);
    expect(r.info.threads).toBeGreaterThan(1);
    expect(r.info.relaxedSimd).toBe(false);
    // This Chromium runs without --enable-unsafe-webgpu: navigator.gpu but no adapter, so the wasm core, quietly
    // (backend left unset), with the reason in info (tests/e2e/webgpu.test.ts has the GPU).
    expect(r.info.backend).toBe("wasm");
    expect(r.info.fallbackReason).toMatch(/requestAdapter\(\) found no GPU adapter|navigator\.gpu is undefined/);
    expect(r.losses[0]!).toBeGreaterThan(1.2); // ~ln 5
    expect(r.losses.at(-1)!).toBeLessThan(0.5 * r.losses[0]!);
    expect(r.outOfRange).toMatch(/inputs\[1\] = 9 is out of range: expected a token id in \[0, 5\)/);
    expect(r.wrongType).toMatch(/inputs must be an Int32Array.*"ab"/);
    expect(r.wrongConfig).toMatch(/config.vocabSize must be a number, got "5" \(a string\)/);
    expect(r.generated).toHaveLength(6);
    expect(r.generated.every((t) => t >= 0 && t < 5)).toBe(true);
    expect(r.disposed).toMatch(/evaluate\(\) was called after dispose\(\)/);
    expect(r.skip).toEqual([
      [true, false, 0],
      [false, true, 1],
    ]);
    expect(r.skipBad).toMatch(/config\.nonFinite = "sometimes" is unknown: expected "error" or "skip"/);
    expect(r.tokJson).toBe('{"version":1,"kind":"char","special":{"pad":true,"bos":true,"eos":true,"unk":true},"vocab":["a","b","c","d"]}');
    expect(r.roundTrip).toBe("dcba");
    expect(r.logits).toEqual(["Float32Array", 4 * 8]);
    expect(r.attention).toBe(16);
    expect(r.saved).toEqual(["Uint8Array", true]);
    expect(r.truncated).toMatch(/truncated/);
    expect(r.sameLogits).toBe(true);
    expect(r.s2sLoss).toBeGreaterThan(0);
    expect(r.s2sGenerated).toHaveLength(4);
    expect(r.s2sCross).toBe(9);
    expect(r.s2sBad).toMatch(/call predict\(\) on the sequence first/);
    expect(r.aborted).toBe("AbortError");
    expect(r.concurrent).toEqual([5, 5, true]);
    expect(r.clsLogits).toBe(6);
    expect(r.memory).toEqual(["LanguageModel", "Seq2Seq", "Classifier"]);
    expect(r.memoryAfter).toEqual([]);
    expect(errors).toEqual([]);
  });
});
