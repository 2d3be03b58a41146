// Opens the built demo (demo/dist) in headless Chromium and drives its three tabs as a user would:
// - the page is cross-origin isolated and runs threaded; the tabs follow the ARIA pattern (arrow keys);
// - Language model: the validation loss falls below LM_VAL_TARGET within LM_TIMEOUT_MS, a sample appears,
//   a saved model loads back and writes the same text at temperature 0, a `qkv train` checkpoint writes
//   what `qkv generate` writes, a bad file shows an error;
// - Sequence to sequence: reverse reaches 99% held-out accuracy within S2S_TIMEOUT_MS and the heatmap canvas
//   holds a drawn map (its pixels are read);
// - Classifier: held-out accuracy well above chance and a full confusion matrix;
// - without COOP/COEP the page runs the single-threaded build and still trains;
// - no console error during the whole run; a screenshot of each tab (laptop and phone width) in
//   tests/e2e/artifacts.
// The times to the issue's figures (validation loss 2.0, reverse 99%) are printed as "figure:" lines; with
// QKV_DEMO_FIGURES=1 the single-threaded page is also trained to both targets (about two minutes more).
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext, Page } from "playwright-core";
import type { DemoState } from "../../demo/src/main.js";
import { launch } from "./chromium.js";
import { preview, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const artifacts = path.join(root, "tests/e2e/artifacts");

/**
 * The LM tab's default (tiny preset, built-in text): ln(58) = 4.06 at the start. The validation loss is
 * measured every 50 steps on 4 k characters of the held-out last 10%. Measured here (2 cores shared with
 * three builds, load average 8-14): below 2.0 at step ~900, after 60-100 s of training (threaded); 200 s
 * is the bound.
 */
const LM_VAL_TARGET = 2.0;
const LM_TIMEOUT_MS = 200_000;
/** Reverse, 200 held-out inputs, greedy decoding: measured here 22-42 s to 99% (step ~175) under the same load. */
const S2S_TARGET = 0.99;
const S2S_TIMEOUT_MS = 150_000;
/** Three topics: chance is 1/3; the shared words ("hot", "cold", "fast") keep it from 100%. */
const CLS_TARGET = 0.8;
const CLS_TIMEOUT_MS = 90_000;
const FIGURES = process.env.QKV_DEMO_FIGURES === "1";

// window.__qkv is declared by demo/src/state.ts (imported through the DemoState type).

let server: PreviewServer;
let context: BrowserContext;
let page: Page;
let userDataDir: string;
/** Every console error and uncaught exception of every page, over the whole run. */
const consoleErrors: string[] = [];

function watch(p: Page, errors: string[]): void {
  p.on("console", (m) => {
    if (m.type() === "error") errors.push(`${m.text()} (${m.location().url})`);
  });
  p.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
}

beforeAll(async () => {
  if (!existsSync(path.join(root, "demo/dist/index.html"))) {
    throw new Error("demo/dist is missing: run `npm run build:web && npm run build:demo` first");
  }
  server = await preview({
    configFile: path.join(root, "demo/vite.config.ts"),
    logLevel: "warn",
    preview: { host: "127.0.0.1", port: 0, strictPort: false, open: false },
  });
  userDataDir = mkdtempSync(path.join(os.tmpdir(), "qkv-e2e-"));
  context = await launch(userDataDir, { width: 1000, height: 1000 });
  page = context.pages()[0] ?? (await context.newPage());
  watch(page, consoleErrors);
});

afterAll(async () => {
  await context?.close();
  await server?.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
});

const demo = (p: Page = page) => p.evaluate(() => window.__qkv!);

/** Awaits a page wait; on failure saves a screenshot and reports the demo's state. */
async function until(wait: Promise<unknown>, what: string, p: Page = page): Promise<void> {
  try {
    await wait;
  } catch (e) {
    mkdirSync(artifacts, { recursive: true });
    await p.screenshot({ path: path.join(artifacts, "demo-failed.png"), fullPage: true }).catch(() => {});
    const state = await p.evaluate(() => window.__qkv).catch(() => undefined);
    throw new Error(`waiting for ${what}: ${(e as Error).message}\ndemo state: ${JSON.stringify(state)}\nconsole errors: ${JSON.stringify(consoleErrors)}`);
  }
}

/** Saves a full-page screenshot of the current tab at laptop width and at phone width (390 px). */
async function screenshots(p: Page, name: string): Promise<void> {
  mkdirSync(artifacts, { recursive: true });
  await p.screenshot({ path: path.join(artifacts, `demo-${name}.png`), fullPage: true });
  // The "Run on" note (shown when the wasm core runs instead of WebGPU) is one box inside the page: as an inline
  // note it broke across lines over the select and ran to the page's right edge at 1280 px.
  const note = await p.evaluate(() => {
    const el = document.querySelector("#backend-note")!;
    return { boxes: el.getClientRects().length, right: el.getBoundingClientRect().right, page: document.querySelector("header")!.getBoundingClientRect().right };
  });
  expect(note.boxes).toBeLessThanOrEqual(1);
  expect(note.right).toBeLessThanOrEqual(note.page + 0.5);
  const size = p.viewportSize();
  await p.setViewportSize({ width: 390, height: 844 });
  try {
    await p.waitForTimeout(300); // the charts and heatmaps follow their container's width on the next frame
    await p.screenshot({ path: path.join(artifacts, `demo-${name}-phone.png`), fullPage: true });
    // Nothing wider than a phone: no horizontal scrolling of the page.
    expect(await p.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  } finally {
    if (size) await p.setViewportSize(size);
  }
}

/** Trains the LM tab of `p` until the validation loss is below the target; returns the state then. */
async function trainLanguageModel(p: Page): Promise<DemoState> {
  await until(
    p.waitForFunction(
      (target) => {
        const s = window.__qkv?.lm;
        return s?.state === "error" || (s?.valLoss != null && s.valLoss < target);
      },
      LM_VAL_TARGET,
      { timeout: LM_TIMEOUT_MS, polling: 250 },
    ),
    `the validation loss to fall below ${LM_VAL_TARGET}`,
    p,
  );
  return demo(p);
}

/** Trains reverse on the seq2seq tab of `p` until 99% held-out accuracy; returns the state then. */
async function trainReverse(p: Page): Promise<DemoState> {
  await p.selectOption("#s2s-task", "reverse");
  await p.click("#s2s-train");
  await until(
    p.waitForFunction(
      (target) => {
        const s = window.__qkv?.seq2seq;
        return s?.state === "error" || (s?.task === "reverse" && s.accuracy != null && s.accuracy >= target);
      },
      S2S_TARGET,
      { timeout: S2S_TIMEOUT_MS, polling: 250 },
    ),
    `reverse to reach ${S2S_TARGET * 100}% held-out accuracy`,
    p,
  );
  return demo(p);
}

function figure(what: string, s: DemoState, seconds: number | null, steps: number): void {
  console.log(
    `figure: ${what}: ${seconds === null ? "not reached" : `${seconds.toFixed(1)} s of training`} (step ${steps}), ` +
      `headless Chromium, ${s.threaded ? `threaded, ${s.threads} threads` : "single-threaded"}, SIMD ${s.simd}; ` +
      `load average ${os.loadavg().map((l) => l.toFixed(1)).join(" ")} on ${os.cpus().length} cores`,
  );
}

describe("demo in headless Chromium", () => {
  it("is cross-origin isolated, runs threaded, and its tabs follow the ARIA tabs pattern", async () => {
    const url = server.resolvedUrls?.local[0];
    expect(url, "vite preview reported no local URL").toBeTruthy();
    const response = await page.goto(url!);
    expect(response?.status()).toBe(200);
    expect(response?.headers()["cross-origin-opener-policy"]).toBe("same-origin");
    expect(response?.headers()["cross-origin-embedder-policy"]).toBe("require-corp");
    expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(true);
    expect(await page.isHidden("#isolation-note")).toBe(true);

    await page.waitForFunction(() => window.__qkv?.threaded != null || window.__qkv?.error != null, null, { timeout: 30_000 });
    const loaded = await demo();
    expect(loaded.error).toBeNull();
    // Chromium has relaxed SIMD (since 114): the loader picks the relaxed-SIMD build.
    expect(loaded).toMatchObject({ crossOriginIsolated: true, threaded: true, relaxedSimd: true });
    expect(loaded.threads).toBeGreaterThan(1);
    expect(loaded.simd).toBeTruthy();
    // The status line says what runs, and (after its first refresh) the wasm memory in use.
    await expect.poll(() => page.textContent("#status"), { timeout: 10_000 })
      .toMatch(new RegExp(`threaded: ${loaded.threads} threads · SIMD ${loaded.simd} \\+ relaxed .*wasm memory [\\d.]+ MiB in use`));

    // Tabs: one tablist, three tabs each controlling a panel; arrow keys move the selection and the focus.
    const tabs = page.locator('[role="tablist"] [role="tab"]');
    expect(await tabs.count()).toBe(3);
    const selected = () => page.getAttribute('[role="tab"][aria-selected="true"]', "id");
    expect(await selected()).toBe("tab-lm");
    expect(await page.isVisible("#panel-lm")).toBe(true);
    expect(await page.isHidden("#panel-seq2seq")).toBe(true);
    await page.focus("#tab-lm");
    await page.keyboard.press("ArrowRight");
    expect(await selected()).toBe("tab-seq2seq");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("tab-seq2seq");
    expect(await page.isVisible("#panel-seq2seq")).toBe(true);
    expect(await page.isHidden("#panel-lm")).toBe(true);
    expect(await page.getAttribute("#tab-lm", "tabindex")).toBe("-1");
    await page.keyboard.press("End");
    expect(await selected()).toBe("tab-classifier");
    await page.keyboard.press("ArrowRight"); // wraps around
    expect(await selected()).toBe("tab-lm");
    expect(await page.getAttribute("#panel-lm", "aria-labelledby")).toBe("tab-lm");

    // The page stays responsive while the LM trains (in the Worker): the main thread keeps running tasks.
    // Each yield is a MessageChannel round trip (setTimeout(0) is clamped to 4 ms, near a step on a fast
    // machine), so an idle main thread yields every few microseconds.
    await page.waitForFunction(() => window.__qkv!.lm.state === "training" && window.__qkv!.lm.step > 0);
    const gaps = await page.evaluate(async () => {
      const channel = new MessageChannel();
      const next = () => new Promise<void>((r) => { channel.port1.onmessage = () => r(); channel.port2.postMessage(0); });
      const gaps: number[] = [];
      let last = performance.now();
      const end = last + 1000;
      while (performance.now() < end) {
        await next();
        const now = performance.now();
        gaps.push(now - last);
        last = now;
      }
      channel.port1.close();
      return gaps;
    });
    // A main thread that ran the steps (batch 8 × 32 tokens each) would make every yield wait for a whole
    // step, so the median gap would be at least a step. Off the main thread, a yield waits a step only when
    // the OS deschedules the page's thread; on a loaded 2-core machine (the Worker's two threads train beside
    // it) CI saw 9% of setTimeout gaps reach a step at load 2. The median ignores those stalls unless they are
    // most of the gaps, so it separates the two cases by far more than the noise: it must stay under a
    // quarter of a step. The stalls and the worst gap are reported.
    const stepMs = (8 * 32 * 1000) / (await demo()).lm.tokensPerSecond;
    const sorted = [...gaps].sort((a, b) => a - b);
    const median = sorted[sorted.length >> 1];
    const stalls = gaps.filter((g) => g >= stepMs).length;
    console.log(
      `e2e: main-thread yields while training: ${gaps.length}, median ${(median * 1000).toFixed(0)} µs, ` +
        `longest ${sorted[sorted.length - 1].toFixed(1)} ms, ${stalls} of them >= one step (${stepMs.toFixed(1)} ms)`,
    );
    expect(gaps.length).toBeGreaterThan((2 * 1000) / stepMs); // a stalled thread yields at most once a step
    expect(median).toBeLessThan(stepMs / 4);
  });

  it("LM tab: the validation loss falls below the target and a sample appears", async () => {
    const t0 = Date.now();
    const trained = await trainLanguageModel(page);
    const s = trained.lm;
    expect(s.error).toBeNull();
    expect(s.firstLoss!).toBeGreaterThan(3.5); // ln(58) = 4.06 for a fresh model
    expect(s.valLoss!).toBeLessThan(LM_VAL_TARGET);
    expect(s.secondsToVal2).not.toBeNull();
    expect(s.tokensPerSecond).toBeGreaterThan(0);
    figure(`char-LM to validation loss ${LM_VAL_TARGET} (tiny preset)`, trained, s.secondsToVal2, s.step);
    console.log(`e2e: LM loss ${s.firstLoss!.toFixed(3)} -> train ${s.lastLoss!.toFixed(3)}, validation ${s.valLoss!.toFixed(3)} ` +
      `at step ${s.step}, ${((Date.now() - t0) / 1000).toFixed(1)} s wall`);
    // The stats show the same numbers.
    expect(await page.textContent("#lm-stats")).toContain(s.valLoss!.toFixed(3));

    // Samples come every 200 steps; validation < 2 takes longer than that.
    await until(page.waitForFunction(() => (window.__qkv?.lm.sampleStep ?? 0) > 0, null, { timeout: 60_000 }), "a sample");
    const sampled = (await demo()).lm;
    expect(sampled.sample.startsWith("First Citizen:")).toBe(true);
    expect(sampled.sample.length).toBeGreaterThan(100);
    expect(await page.textContent("#lm-sample")).toBe(sampled.sample);
    await screenshots(page, "lm");
    expect(consoleErrors).toEqual([]);
  }, LM_TIMEOUT_MS + 90_000);

  it("LM tab: a saved model loads back and writes the same text at temperature 0", async () => {
    // No sample of the loop's own (every 200 steps, with the prompt it read then) may land between the two below:
    // with "every" 0, two more steps mean that a sample in flight has ended and no step starts another.
    await page.fill("#lm-every", "0");
    const step = (await demo()).lm.step;
    await until(page.waitForFunction((n) => window.__qkv!.lm.step >= n + 2, step), "two steps without samples");
    await page.click("#lm-toggle"); // pause: the model must not change between the two samples
    await page.waitForFunction(() => window.__qkv?.lm.state === "paused");
    await page.fill("#lm-temperature", "0");
    await page.fill("#lm-prompt", "MENENIUS:");
    const samples = (await demo()).lm.samples;
    await page.click("#lm-sample-now");
    await until(page.waitForFunction((n) => window.__qkv!.lm.samples > n && document.querySelector<HTMLElement>("#lm-sample")?.dataset.done === "yes", samples), "the sample before saving");
    const before = (await demo()).lm;

    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#lm-save")]);
    const saved = readFileSync((await download.path())!);
    expect(download.suggestedFilename()).toMatch(/^qkv-lm-step\d+\.safetensors$/);
    expect(saved.length).toBeGreaterThan(100_000); // weights + Adam moments of ~110 k parameters
    // The tokenizer is in the file's metadata, so the file is self-contained.
    const header = JSON.parse(saved.subarray(8, 8 + Number(saved.readBigUInt64LE(0))).toString("utf8"));
    expect(JSON.parse(header.__metadata__["qkv.tokenizer"]).kind).toBe("char");

    await page.setInputFiles("#lm-load", { name: "saved.safetensors", mimeType: "application/octet-stream", buffer: saved });
    await until(page.waitForFunction((n) => window.__qkv!.lm.samples > n && document.querySelector<HTMLElement>("#lm-sample")?.dataset.done !== "", before.samples), "the loaded model's sample");
    expect(await page.getAttribute("#lm-sample", "data-done")).toBe("yes");
    const after = (await demo()).lm;
    expect(after.sample.length).toBeGreaterThan("MENENIUS:".length + 100);
    expect(after.sample).toBe(before.sample);
    expect(await page.textContent("#lm-model")).toContain("saved.safetensors");
    await page.fill("#lm-every", "200");
    expect(consoleErrors).toEqual([]);
  });

  it("LM tab: loads a checkpoint from the native `qkv train` and writes what `qkv generate` writes", async () => {
    // The README's native quick start, end to end: train on a text file, generate natively, load the same
    // checkpoint in the page; greedy decoding must give the same text in both.
    const qkv = path.join(root, "build/native/cpp/tools/qkv");
    expect(existsSync(qkv), "build/native/cpp/tools/qkv is missing: run scripts/build.sh first").toBe(true);
    const dir = mkdtempSync(path.join(os.tmpdir(), "qkv-e2e-ckpt-"));
    try {
      const ckpt = path.join(dir, "lm.safetensors");
      const run = (args: string[]) => execFileSync(qkv, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      run(["train", "--data", path.join(root, "demo/src/corpus.txt"), "--steps", "40", "--threads", "1", "--out", ckpt]);
      const native = run(["generate", "--ckpt", ckpt, "--prompt", "ROMEO:", "--max-tokens", "200", "--temperature", "0",
        "--seed", "1", "--threads", "1"]).replace(/\n$/, "");
      expect(native.length).toBeGreaterThan(6);

      await page.fill("#lm-prompt", "ROMEO:");
      await page.fill("#lm-temperature", "0");
      await page.fill("#lm-length", "200");
      const samples = (await demo()).lm.samples;
      await page.setInputFiles("#lm-load", { name: "lm.safetensors", mimeType: "application/octet-stream", buffer: readFileSync(ckpt) });
      await until(page.waitForFunction((n) => window.__qkv!.lm.samples > n, samples, { timeout: 30_000 }), "the loaded model's sample");
      expect(await page.getAttribute("#lm-sample", "data-done")).toBe("yes");
      expect(await page.textContent("#lm-sample")).toBe(native);
      expect(await page.textContent("#lm-model")).toMatch(/tokenizer\s*char, \d+ tokens/);

      // A file that is not a checkpoint: the panel says so, and the page keeps working.
      await page.setInputFiles("#lm-load", { name: "bad.safetensors", mimeType: "application/octet-stream",
        buffer: Buffer.from("not a checkpoint") });
      await until(page.waitForFunction(() => document.querySelector<HTMLElement>("#lm-sample")?.dataset.done === "error",
        null, { timeout: 30_000 }), "the error of a bad file");
      expect(await page.textContent("#lm-sample")).toMatch(/^Error: /);
      expect(consoleErrors).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("LM tab: trains on pasted text, and says why when the text is too short", async () => {
    await page.selectOption("#lm-source", "own");
    expect(await page.isVisible("#lm-text")).toBe(true);
    await page.fill("#lm-text", "too short");
    await page.click("#lm-new");
    await expect.poll(() => page.textContent("#lm-error")).toMatch(/^your text has 9 characters: give at least 200/);
    // Long enough for the first check, too short for the tiny shape's held-out windows: refused before the tab's
    // model is replaced, which goes on training (still the built-in text's tokenizer, not this text's 26).
    const modelBefore = await page.textContent("#lm-model");
    await page.fill("#lm-text", "abcdefghijklmnopqrstuvwxyz".repeat(10));
    await page.click("#lm-new");
    await expect.poll(() => page.textContent("#lm-error")).toMatch(
      /^cannot train on this text: text has 260 characters: the held-out 10% must hold more than \d+ tokens \(the training window\); give at least \d+ characters$/);
    expect(await page.textContent("#lm-model")).toBe(modelBefore);
    // 11 distinct characters (newline included), 3,150 characters long.
    const text = "the cat sat on a mat\n".repeat(150);
    await page.fill("#lm-text", text);
    await page.click("#lm-new");
    await until(page.waitForFunction(() => window.__qkv!.lm.step >= 5 && window.__qkv!.lm.state === "training"), "training on pasted text");
    expect(await page.textContent("#lm-model")).toMatch(/tokenizer\s*char, 11 tokens/);
    expect(await page.textContent("#lm-error")).toBe("");
    await page.selectOption("#lm-source", "builtin");
    expect(consoleErrors).toEqual([]);
  });

  it("seq2seq tab: reverse reaches 99% held-out accuracy and the attention heatmap is drawn", async () => {
    await page.click("#tab-seq2seq");
    const trained = await trainReverse(page);
    const s = trained.seq2seq;
    expect(s.error).toBeNull();
    expect(s.accuracy!).toBeGreaterThanOrEqual(S2S_TARGET);
    expect(s.secondsTo99).not.toBeNull();
    figure("reverse to 99% held-out accuracy", trained, s.secondsTo99, s.step);
    // Training may stop by itself at 100%; pause it either way so the heatmap below stays put.
    if (s.state === "training") await page.click("#s2s-toggle");
    await page.waitForFunction(() => window.__qkv?.seq2seq.state !== "training");

    const heatmaps = (await demo()).seq2seq.heatmaps;
    await page.fill("#s2s-input", "hgfedcba");
    await page.press("#s2s-input", "Enter");
    await until(page.waitForFunction((n) => window.__qkv!.seq2seq.heatmaps > n && window.__qkv!.seq2seq.input === "hgfedcba", heatmaps), "the heatmap");
    const after = (await demo()).seq2seq;
    expect(await page.textContent("#s2s-output")).toBe(after.output);
    expect(after.output).toMatch(/^[a-j]{1,8}$/);

    // The canvas holds a map: many non-white pixels in several colours (cells, labels, legend).
    const pixels = await page.evaluate(() => {
      const c = document.querySelector<HTMLCanvasElement>("#s2s-heatmap")!;
      const d = c.getContext("2d")!.getImageData(0, 0, c.width, c.height).data;
      let ink = 0;
      const colours = new Set<number>();
      for (let i = 0; i < d.length; i += 4) {
        if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) ink++;
        colours.add((d[i]! << 16) | (d[i + 1]! << 8) | d[i + 2]!);
      }
      return { width: c.width, height: c.height, ink, colours: colours.size };
    });
    expect(pixels.width).toBeGreaterThan(100);
    expect(pixels.height).toBeGreaterThan(100);
    // 8 × 9 cells of at least 10 px square are at least 7200 px; most of them are not white.
    expect(pixels.ink).toBeGreaterThan(5000);
    expect(pixels.colours).toBeGreaterThan(20);

    // Self-attention of the encoder, another layer and head: the map is redrawn.
    await page.selectOption("#s2s-kind", "encoder");
    await page.selectOption("#s2s-layer", { value: "1" }); // the second layer
    await until(page.waitForFunction((n) => window.__qkv!.seq2seq.heatmaps > n, after.heatmaps), "the encoder heatmap");
    // Back to the cross-attention (reverse's anti-diagonal) for the screenshots.
    const encoder = (await demo()).seq2seq.heatmaps;
    await page.selectOption("#s2s-kind", "cross");
    await until(page.waitForFunction((n) => window.__qkv!.seq2seq.heatmaps > n, encoder), "the cross-attention heatmap");
    await screenshots(page, "seq2seq");
    expect(consoleErrors).toEqual([]);
  });

  it("seq2seq tab: sort, addition and dates train and answer; input outside a task's alphabet is refused by name", async () => {
    await page.fill("#s2s-input", "abc!");
    await page.press("#s2s-input", "Enter");
    await expect.poll(() => page.textContent("#s2s-error"))
      .toBe('input[3] = "!" is not in this task\'s alphabet: expected one of "abcdefghij"');
    for (const [task, example] of [["sort", "jchbfa"], ["add", "57+68"], ["dates", "22 November 2026"]] as const) {
      await page.selectOption("#s2s-task", task);
      expect(await page.inputValue("#s2s-input")).toBe(example);
      // The select shows a task the model has not learned: said, and Run answers the same, until Train.
      const other = /^the model learned ".+": press Train to learn ".+"$/;
      expect(await page.textContent("#s2s-error")).toMatch(other);
      await page.press("#s2s-input", "Enter");
      await expect.poll(() => page.textContent("#s2s-error")).toMatch(other);
      await page.click("#s2s-train");
      // One held-out evaluation (step 25) runs the example and draws its map.
      await until(page.waitForFunction((t) => {
        const s = window.__qkv!.seq2seq;
        return s.state === "error" || (s.task === t && s.accuracy !== null && s.input === document.querySelector<HTMLInputElement>("#s2s-input")!.value);
      }, task, { timeout: 60_000 }), `the ${task} task's first evaluation`);
      const s = (await demo()).seq2seq;
      expect(s.error).toBeNull();
      // Learning by the first evaluation (step 25): the loss (mean of the last 10 steps) fell to 0.52-0.69 of
      // the first step's in a run on 2026-11-29 (sort, add, dates); the held-out accuracy is still near 0 there.
      expect(s.lastLoss!).toBeLessThan(0.8 * s.firstLoss!);
      expect(await page.textContent("#s2s-output")).toBe(s.output);
    }
    await page.click("#s2s-toggle");
    expect(consoleErrors).toEqual([]);
  });

  it("classifier tab: held-out accuracy well above chance, a full confusion matrix", async () => {
    await page.click("#tab-classifier");
    await page.click("#cls-train");
    await until(
      page.waitForFunction(
        (target) => {
          const s = window.__qkv?.classifier;
          return s?.state === "error" || (s?.accuracy != null && s.accuracy >= target);
        },
        CLS_TARGET,
        { timeout: CLS_TIMEOUT_MS, polling: 250 },
      ),
      `the classifier to reach ${CLS_TARGET * 100}%`,
    );
    const s = (await demo()).classifier;
    expect(s.error).toBeNull();
    expect(s.accuracy!).toBeGreaterThanOrEqual(CLS_TARGET);
    const total = s.confusion!.flat().reduce((a, b) => a + b, 0);
    expect(total).toBe(300);
    const diagonal = s.confusion!.reduce((a, row, i) => a + row[i]!, 0);
    expect(diagonal / total).toBeCloseTo(s.accuracy!, 10);
    expect(await page.locator("#cls-confusion tbody tr").count()).toBe(3);
    console.log(`e2e: classifier ${(100 * s.accuracy!).toFixed(1)}% at step ${s.step}, ${s.seconds.toFixed(1)} s`);
    await page.click("#cls-toggle");
    await page.click("#cls-run");
    await page.waitForFunction(() => (document.querySelector("#cls-output")?.textContent ?? "").includes("%"));
    expect(await page.textContent("#cls-output")).toMatch(/^weather \d+% · food \d+% · sport \d+%$/);
    await screenshots(page, "classifier");
    expect(consoleErrors).toEqual([]);
  });

  it("without COOP/COEP falls back to the single-threaded build, says so, and trains", async () => {
    // The same build served with no isolation headers (no config file: nothing to merge them from).
    const plain = await preview({
      configFile: false,
      root: path.join(root, "demo"),
      base: "./",
      logLevel: "warn",
      build: { outDir: "dist" },
      preview: { host: "127.0.0.1", port: 0, strictPort: false, open: false },
    });
    // Only this page computes now: the isolated one would share the cores.
    await page.close();
    const p = await context.newPage();
    const warnings: string[] = [];
    p.on("console", (m) => {
      if (m.type() === "warning") warnings.push(m.text());
    });
    watch(p, consoleErrors);
    try {
      const response = await p.goto(plain.resolvedUrls!.local[0]!);
      expect(response?.headers()["cross-origin-opener-policy"]).toBeUndefined();
      expect(await p.evaluate(() => globalThis.crossOriginIsolated)).toBe(false);
      expect(await p.isVisible("#isolation-note")).toBe(true);
      expect(await p.textContent("#isolation-note")).toContain("Cross-Origin-Embedder-Policy: require-corp");
      await p.waitForFunction(() => window.__qkv?.error != null || (window.__qkv?.lm.step ?? 0) >= 20, null, { timeout: 60_000 });
      const s = await demo(p);
      expect(s.error).toBeNull();
      expect(s).toMatchObject({ crossOriginIsolated: false, threaded: false, threads: 1 });
      // It learns: 20 steps bring the mean of the last 10 losses to 0.78 of the first step's (4.12 -> 3.21 in a run
      // on 2026-11-29; the same seed and batches as the threaded build's).
      expect(s.lm.lastLoss!).toBeLessThan(0.85 * s.lm.firstLoss!);
      expect(await p.textContent("#status")).toMatch(/single-threaded/);
      const fallback = warnings.filter((w) => w.includes("not cross-origin isolated"));
      expect(fallback).toHaveLength(1);
      expect(fallback[0]).toContain("Cross-Origin-Opener-Policy: same-origin");
      expect(fallback[0]).toContain("Cross-Origin-Embedder-Policy: require-corp");
      mkdirSync(artifacts, { recursive: true });
      await p.screenshot({ path: path.join(artifacts, "demo-single-threaded.png"), fullPage: true });

      if (FIGURES) {
        const lm = await trainLanguageModel(p);
        expect(lm.lm.valLoss!).toBeLessThan(LM_VAL_TARGET);
        figure(`char-LM to validation loss ${LM_VAL_TARGET} (tiny preset)`, lm, lm.lm.secondsToVal2, lm.lm.step);
        await p.click("#tab-seq2seq");
        const rev = await trainReverse(p);
        expect(rev.seq2seq.accuracy!).toBeGreaterThanOrEqual(S2S_TARGET);
        figure("reverse to 99% held-out accuracy", rev, rev.seq2seq.secondsTo99, rev.seq2seq.step);
      }
      expect(consoleErrors).toEqual([]);
    } finally {
      await p.close();
      await plain.close();
    }
  }, FIGURES ? 600_000 : 120_000);

  it("logged no console error and no uncaught exception during the whole run", () => {
    expect(consoleErrors).toEqual([]);
  });
});
