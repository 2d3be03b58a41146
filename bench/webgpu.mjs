// qkv's WebGPU backend against its own wasm build in headless Chromium, on the same page and model: the char
// GPT of nanoGPT's CPU recipe (bench/char_gpt_recipe.h: 4 pre-LN layers, 4 heads, 128 wide, context 64,
// batch 12) for the training step, and batch-1 greedy generation with the KV cache.
//
//   node bench/webgpu.mjs                 # after `bash scripts/build-wasm.sh && npm run build:web`
//   WEBGPU_BENCH_STEPS=20 WEBGPU_BENCH_TOKENS=64 CHROMIUM_FLAGS="--enable-features=Vulkan" node bench/webgpu.mjs
//
// The peer: TensorFlow.js's WebGPU backend on the same page, training the same model from the same initial
// weights (bench/web/tfjs_gpt.mjs, the twin bench/run_web.sh trains on TF.js's wasm backend); it runs when
// bench/web's packages are installed (npm ci --prefix bench/web), else its row says how to get it.
//
// Here (no GPU) Chromium's adapter is SwiftShader, WebGPU emulated on the CPU: the table is a smoke test that
// the path runs end to end, not a speed figure. Where a real GPU is reachable, run it there (CHROMIUM_FLAGS
// for that machine, e.g. --use-angle=vulkan --enable-features=Vulkan) for the ratio to the wasm build.
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { existsSync } from "node:fs";
import { build } from "esbuild";
import { preview } from "vite";

const root = fileURLToPath(new URL("..", import.meta.url));
const STEPS = Number(process.env.WEBGPU_BENCH_STEPS ?? 10);
const WARMUP = Number(process.env.WEBGPU_BENCH_WARMUP ?? 2);
const TOKENS = Number(process.env.WEBGPU_BENCH_TOKENS ?? 32);
const FLAGS = (process.env.CHROMIUM_FLAGS ?? "").split(" ").filter(Boolean);

const PAGE = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script src="./tfpeer.js"></script>
<script type="module">
  import { init, LanguageModel } from "./pkg/browser.js";
  const q = new URLSearchParams(location.search);
  const out = {};
  try {
    const side = q.get("backend");
    out.info = await init({ backend: side === "tfjs-webgpu" ? "wasm" : side });
    const V = 65, B = 12, T = 64;
    const lm = await LanguageModel.create({ vocabSize: V, context: T, dModel: 128, heads: 4, layers: 4, activation: "gelu",
      norm: "pre", bias: false, positions: "learned", tieHead: true, finalNorm: true, dropout: 0, lr: 1e-3, weightDecay: 0.1,
      decayMatricesOnly: true, gradClip: 1, beta2: 0.99, eps: 1e-8 });
    let s = 1;
    const batch = () => { const x = new Int32Array(B * T), y = new Int32Array(B * T);
      for (let i = 0; i < B * T; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; x[i] = (s >>> 8) % V; y[i] = (x[i] + 1) % V; } return [x, y]; };
    let step = async (x, y) => (await lm.trainStep(x, y, { batch: B })).loss;
    if (side === "tfjs-webgpu") {
      // The same initial weights: the qkv model's checkpoint, read as { name: { shape, data } }.
      const bytes = await lm.save({ optimizer: false });
      const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
      const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
      const tensors = {};
      for (const [name, t] of Object.entries(header)) {
        if (name === "__metadata__") continue;
        const [b0, b1] = t.data_offsets;
        tensors[name] = { shape: t.shape, data: new Float32Array(bytes.slice(8 + n + b0, 8 + n + b1).buffer) };
      }
      const { tf, createTfGpt } = window.tfPeer;
      if (!(await tf.setBackend("webgpu"))) throw new Error("TF.js could not start its webgpu backend");
      await tf.ready();
      const tfm = createTfGpt(tf, tensors, JSON.parse(header.__metadata__["qkv.config"]), JSON.parse(header.__metadata__["qkv.optimizer"]));
      out.info = { backend: "tfjs-webgpu", adapter: "TF.js " + tf.version.tfjs };
      step = (x, y) => tfm.trainStep(x, y, B, T);
    }
    const times = [];
    for (let i = 0; i < ${WARMUP} + ${STEPS}; i++) {
      const [x, y] = batch();
      const t0 = performance.now();
      out.loss = await step(x, y);
      if (i >= ${WARMUP}) times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    out.stepMs = times[Math.floor(times.length / 2)];
    out.tokensPerSecond = (B * T) / (out.stepMs / 1000);
    if (side !== "tfjs-webgpu") {
      await lm.generate(Int32Array.of(1, 2, 3), { maxTokens: 4, temperature: 0 });
      const g0 = performance.now();
      const made = await lm.generate(Int32Array.of(1, 2, 3), { maxTokens: ${TOKENS}, temperature: 0 });
      out.genTokensPerSecond = made.length / ((performance.now() - g0) / 1000);
    }
    lm.dispose();
  } catch (e) { out.error = String(e && e.stack || e); }
  window.__out = out;
</script>`;

const dir = mkdtempSync(path.join(os.tmpdir(), "qkv-webgpu-bench-"));
cpSync(path.join(root, "web/dist"), path.join(dir, "site/pkg"), { recursive: true });
writeFileSync(path.join(dir, "site/index.html"), PAGE);
// TF.js and its WebGPU backend with the model's TF.js twin, bundled for the page (window.tfPeer).
const peerDir = path.join(root, "bench/web");
const havePeer = existsSync(path.join(peerDir, "node_modules/@tensorflow/tfjs-backend-webgpu"));
if (havePeer) {
  await build({
    stdin: {
      contents: `import * as tf from "@tensorflow/tfjs"; import "@tensorflow/tfjs-backend-webgpu";
        import { createTfGpt } from "./tfjs_gpt.mjs"; window.tfPeer = { tf, createTfGpt };`,
      resolveDir: peerDir,
    },
    bundle: true,
    format: "iife",
    outfile: path.join(dir, "site/tfpeer.js"),
    logLevel: "warning",
  });
} else {
  writeFileSync(path.join(dir, "site/tfpeer.js"), "");
}
const server = await preview({
  configFile: false,
  root: dir,
  logLevel: "warn",
  build: { outDir: "site" },
  preview: { host: "127.0.0.1", port: 0, headers: { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" } },
});
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--enable-unsafe-webgpu", ...FLAGS],
});
const rows = [];
try {
  for (const backend of ["wasm", "webgpu", ...(havePeer ? ["tfjs-webgpu"] : [])]) {
    const page = await browser.newPage();
    await page.goto(`${server.resolvedUrls.local[0]}?backend=${backend}`);
    await page.waitForFunction(() => "__out" in window, null, { timeout: 1_800_000, polling: 1000 });
    const r = await page.evaluate(() => window.__out);
    await page.close();
    if (r.error) throw new Error(`${backend}: ${r.error}`);
    rows.push({ backend, ...r });
  }
} finally {
  await browser.close();
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}

const [wasm, gpu, tfjs] = rows;
console.log(`machine: ${os.cpus().length} cores, ${os.cpus()[0]?.model}; ${STEPS} steps after ${WARMUP} warm-up, ${TOKENS} tokens`);
console.log(`adapter: ${gpu.info.adapter} (wasm: ${wasm.info.threads} threads, ${wasm.info.simd}${wasm.info.relaxedSimd ? " + relaxed" : ""})`);
console.log("| backend | train step ms (median) | tokens/s | generation tokens/s (batch 1) | last loss |");
console.log("| --- | ---: | ---: | ---: | ---: |");
for (const r of rows) {
  const gen = r.genTokensPerSecond === undefined ? "-" : r.genTokensPerSecond.toFixed(1);
  console.log(`| ${r.backend} | ${r.stepMs.toFixed(1)} | ${r.tokensPerSecond.toFixed(0)} | ${gen} | ${r.loss.toFixed(4)} |`);
}
if (!tfjs) console.log("| tfjs-webgpu | not run: npm ci --prefix bench/web installs TF.js and its WebGPU backend | | | |");
console.log(`webgpu / wasm: training ${(gpu.tokensPerSecond / wasm.tokensPerSecond).toFixed(2)}x, generation ${(gpu.genTokensPerSecond / wasm.genTokensPerSecond).toFixed(2)}x` +
  (tfjs ? `; qkv webgpu / TF.js webgpu: training ${(gpu.tokensPerSecond / tfjs.tokensPerSecond).toFixed(2)}x` : "") +
  (/swiftshader/i.test(gpu.info.adapter) ? " (SwiftShader: WebGPU emulated on the CPU; not a speed figure)" : ""));
