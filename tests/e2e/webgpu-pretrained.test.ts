// An imported GPT-2 on WebGPU in headless Chromium (SwiftShader: correctness, not speed): the tiny random GPT-2
// folder of tests/fixtures/import/gpt2_tok (Hub layout, Conv1D weights, tanh GELU, a BPE tokenizer.json) is loaded
// with LanguageModel.fromPretrained from the test server in two pages, one on init({ backend: "webgpu" }) and one
// on "wasm". As webgpu.test.ts asks of the models made in the page: logits within 1e-5 (relative, of max(1, |x|))
// of the wasm core's, greedy tokens equal (with and without the KV cache, and streamed), and the greedy text
// equal to the fixture script's PyTorch tokens (gpt2_tok.greedy.txt, from the same prompt).
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext } from "playwright-core";
import { preview, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launch } from "./chromium.js";
import { expectClose, pageResult } from "./page.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const FIXTURES = path.join(root, "tests/fixtures/import");

const PAGE = `<!doctype html>
<meta charset="utf-8">
<link rel="icon" href="data:,">
<script type="module">
  import { init, LanguageModel } from "./pkg/browser.js";
  const q = new URLSearchParams(location.search);
  const result = {};
  const arr = (x) => Array.from(x);
  try {
    result.info = await init({ backend: q.get("backend"), relaxedSimd: false });
    const lm = await LanguageModel.fromPretrained("models/gpt2_tok/");
    result.config = lm.config;
    const prompt = await lm.tokenizer.encode(q.get("prompt"));
    result.prompt = arr(prompt);
    // Two rows: the prompt and the prompt reversed (a batch of 2 through every kernel).
    const x = new Int32Array(2 * prompt.length);
    x.set(prompt, 0);
    x.set(prompt.slice().reverse(), prompt.length);
    result.logits = arr(await lm.predict(x, { batch: 2 }));
    const n = Number(q.get("tokens"));
    result.greedy = arr(await lm.generate(prompt, { maxTokens: n, temperature: 0 }));
    result.greedyNoCache = arr(await lm.generate(prompt, { maxTokens: n, temperature: 0, useCache: false }));
    result.streamed = [];
    for await (const t of lm.stream(prompt, { maxTokens: n, temperature: 0 })) result.streamed.push(t);
    result.text = await lm.generate(q.get("prompt"), { maxTokens: n, temperature: 0 });
    lm.dispose();
  } catch (e) {
    result.error = String((e && e.stack) || e);
  }
  window.__result = result;
</script>`;

let server: PreviewServer;
let context: BrowserContext;
let dir: string;

beforeAll(async () => {
  if (!existsSync(path.join(root, "web/dist/gpu-worker.js"))) throw new Error("web/dist is missing: run `npm run build:web` first");
  dir = mkdtempSync(path.join(os.tmpdir(), "qkv-webgpu-pt-"));
  cpSync(path.join(root, "web/dist"), path.join(dir, "site/pkg"), { recursive: true });
  cpSync(path.join(FIXTURES, "gpt2_tok"), path.join(dir, "site/models/gpt2_tok"), { recursive: true });
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
  context = await launch(path.join(dir, "profile"), undefined, { webgpu: true });
});

afterAll(async () => {
  await context?.close();
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The fixture's prompt and the PyTorch greedy tokens after it (tests/fixtures/make_gpt2_fixtures.py). */
function fixture(): { prompt: string; greedy: number[] } {
  const prompt = readFileSync(path.join(FIXTURES, "gpt2_tok.prompt.txt"), "utf8");
  const lines = readFileSync(path.join(FIXTURES, "gpt2_tok.greedy.txt"), "utf8").trim().split("\n");
  return { prompt, greedy: lines[1]!.trim().split(/\s+/).map(Number) };
}

async function run(backend: "webgpu" | "wasm", prompt: string, tokens: number): Promise<Record<string, unknown>> {
  const q = new URLSearchParams({ backend, prompt, tokens: String(tokens) });
  return pageResult(context, `${server.resolvedUrls!.local[0]!}?${q}`, { timeout: 300_000, polling: 250 });
}

describe("an imported GPT-2 on WebGPU", () => {
  it("gives the wasm core's logits and greedy tokens, and PyTorch's greedy tokens", async () => {
    const { prompt, greedy } = fixture();
    const gpu = await run("webgpu", prompt, greedy.length);
    const wasm = await run("wasm", prompt, greedy.length);
    const info = gpu.info as { backend: string; adapter: string };
    expect(info.backend).toBe("webgpu");
    expect(info.adapter).toMatch(/swiftshader/i);
    expect((wasm.info as { backend: string }).backend).toBe("wasm");
    // The fixture's shape: GPT-2's tanh GELU, 657 BPE tokens (the head tied to the embedding).
    expect(gpu.config).toMatchObject({ vocabSize: 657, layers: 2, heads: 2, dModel: 16, activation: "gelu_tanh" });
    expect(gpu.prompt).toEqual(wasm.prompt);
    const T = (gpu.prompt as number[]).length;
    expect((gpu.logits as number[]).length).toBe(2 * T * 657);
    expectClose(gpu.logits, wasm.logits, 1e-5, "logits");
    // And it did run on the GPU: another order of float32 sums, so not every logit is the wasm core's bit for bit.
    const differ = (gpu.logits as number[]).filter((v, i) => v !== (wasm.logits as number[])[i]).length;
    console.log(`webgpu: ${differ} of ${(wasm.logits as number[]).length} logits differ from the wasm core's in the last bits`);
    expect(differ).toBeGreaterThan(0);
    expect(gpu.greedy).toEqual(wasm.greedy);
    expect(gpu.greedy).toEqual(greedy);
    expect(gpu.greedyNoCache).toEqual(gpu.greedy);
    expect(gpu.streamed).toEqual(gpu.greedy);
    expect(gpu.text).toBe(wasm.text);
  }, 600_000);
});
