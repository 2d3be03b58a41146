// Token streaming through the browser Worker (web/dist served as plain modules): generate({ onToken }) and
// stream() give generate()'s tokens, the tokens cross from the Worker while it generates, and a loop that
// ends early stops the Worker's generation. Run on a cross-origin isolated page (threaded build) and on a
// plain one (single-threaded build, no SharedArrayBuffer): cancelling needs no shared memory.
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext } from "playwright-core";
import { preview, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launch } from "./chromium.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

const PAGE = `<!doctype html>
<meta charset="utf-8">
<link rel="icon" href="data:,">
<script type="module">
  import { init, LanguageModel } from "./pkg/browser.js";
  const result = {};
  try {
    result.info = await init();
    const lm = await LanguageModel.create({ vocabSize: 9, context: 8, dModel: 16, heads: 2, layers: 2, seed: 4 });
    const prompt = Int32Array.of(1, 2, 3);
    const greedy = { maxTokens: 30, temperature: 0 };
    const sampled = { maxTokens: 30, temperature: 1.2, topK: 6, seed: 8 };
    result.cases = [];
    for (const o of [greedy, sampled]) {
      const plain = Array.from(await lm.generate(prompt, o));
      const events = [];
      const viaOnToken = Array.from(
        await lm.generate(prompt, { ...o, onToken: (t, i) => events.push([t, i]) }).then((r) => {
          events.push("resolved");
          return r;
        }),
      );
      const streamed = [];
      for await (const t of lm.stream(prompt, o)) {
        streamed.push(t);
        if (streamed.length === 5) await lm.predict(prompt); // another call between two tokens
      }
      result.cases.push({ plain, viaOnToken, events, streamed });
    }

    // The tokens cross while the Worker generates: the first arrives long before the last.
    const start = performance.now();
    const arrivals = [];
    await lm.generate(prompt, { maxTokens: 3000, temperature: 1, seed: 1, onToken: () => arrivals.push(performance.now() - start) });
    result.timing = { first: arrivals[0], last: arrivals.at(-1), resolved: performance.now() - start, count: arrivals.length };

    // Breaking out after 3 of ten million tokens: the loop ends only once the Worker has stopped.
    const breakStart = performance.now();
    let delivered = 0;
    const first = [];
    for await (const t of lm.stream(prompt, { ...sampled, maxTokens: 10000000, onToken: () => delivered++ })) {
      first.push(t);
      if (first.length === 3) break;
    }
    result.breakMs = performance.now() - breakStart;
    result.first = first;
    result.delivered = delivered;
    result.afterBreak = Array.from(await lm.generate(prompt, sampled));
    result.loss = (await lm.trainStep(Int32Array.of(1, 2, 3, 4), Int32Array.of(2, 3, 4, 5))).loss;

    const error = new Error("the page closed");
    const seen = [];
    result.thrown = await lm
      .generate(prompt, { ...sampled, maxTokens: 10000000, onToken: (t, i) => { seen.push(t); if (i === 2) throw error; } })
      .then(() => "resolved", (e) => e === error);
    result.seenBeforeThrow = seen;
    result.badOption = await lm.generate(prompt, { maxTokens: 2, onToken: 5 }).then(() => "resolved", (e) => e.name + ": " + e.message);
    lm.dispose();
  } catch (e) {
    result.error = String((e && e.stack) || e);
  }
  window.__result = result;
</script>`;

interface Result {
  error?: string;
  info: { threaded: boolean };
  cases: { plain: number[]; viaOnToken: number[]; events: ([number, number] | "resolved")[]; streamed: number[] }[];
  timing: { first: number; last: number; resolved: number; count: number };
  breakMs: number;
  first: number[];
  delivered: number;
  afterBreak: number[];
  loss: number;
  thrown: boolean | string;
  seenBeforeThrow: number[];
  badOption: string;
}

let dir: string;
let context: BrowserContext;
const servers: PreviewServer[] = [];

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), "qkv-stream-"));
  cpSync(path.join(root, "web/dist"), path.join(dir, "site/pkg"), { recursive: true });
  writeFileSync(path.join(dir, "site/index.html"), PAGE);
  mkdirSync(path.join(dir, "profile"));
  context = await launch(path.join(dir, "profile"));
});

afterAll(async () => {
  await context?.close();
  for (const s of servers) await s.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function run(isolated: boolean): Promise<{ r: Result; errors: string[] }> {
  const server = await preview({
    configFile: false,
    root: dir,
    logLevel: "warn",
    build: { outDir: "site" },
    preview: {
      host: "127.0.0.1",
      port: 0,
      headers: isolated ? { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" } : {},
    },
  });
  servers.push(server);
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  await page.goto(server.resolvedUrls!.local[0]!);
  await page.waitForFunction(() => "__result" in window, null, { timeout: 120_000 });
  const r = (await page.evaluate(() => (window as unknown as { __result: unknown }).__result)) as Result;
  await page.close();
  return { r, errors };
}

describe("streaming through the Worker", () => {
  for (const isolated of [true, false]) {
    it(isolated ? "cross-origin isolated (threaded build)" : "not isolated (single-threaded build)", async () => {
      const { r, errors } = await run(isolated);
      expect(r.error).toBeUndefined();
      expect(r.info.threaded).toBe(isolated);
      expect(r.cases).toHaveLength(2);
      for (const c of r.cases) {
        expect(c.plain).toHaveLength(30);
        expect(c.viaOnToken).toEqual(c.plain);
        expect(c.events).toEqual([...c.plain.map((t, i) => [t, i]), "resolved"]);
        expect(c.streamed).toEqual(c.plain);
      }
      expect(r.cases[1]!.plain).not.toEqual(r.cases[0]!.plain); // sampled is not greedy
      // Streamed, not delivered at the end: the first token came in the first half of the run.
      expect(r.timing.count).toBe(3000);
      expect(r.timing.first).toBeLessThan(r.timing.resolved / 2);
      expect(r.timing.last).toBeLessThanOrEqual(r.timing.resolved);
      // The Worker stopped after the break (ten million tokens would take hours).
      expect(r.breakMs).toBeLessThan(10_000);
      expect(r.first).toEqual(r.cases[1]!.plain.slice(0, 3));
      expect(r.delivered).toBe(3);
      expect(r.afterBreak).toEqual(r.cases[1]!.plain);
      expect(Number.isFinite(r.loss)).toBe(true);
      expect(r.thrown).toBe(true);
      expect(r.seenBeforeThrow).toEqual(r.cases[1]!.plain.slice(0, 3));
      expect(r.badOption).toMatch(/^TypeError: options\.onToken must be a function \(token, index\) => void, got 5 \(a number\)$/);
      expect(errors).toEqual([]);
    });
  }
});
