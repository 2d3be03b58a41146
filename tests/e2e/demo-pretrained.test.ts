// The demo's pretrained section (language-model tab) in headless Chromium, with no network: the test server
// serves the built demo and a tiny random GPT-2 folder in the Hub's layout (tests/fixtures/import/gpt2_tok:
// config.json, model.safetensors, tokenizer.json). The page loads it by URL, through the file input and from a
// drop, every file's progress reaches its size, and the text it streams at temperature 0 is the package's greedy
// output computed here in Node (web/dist, the same build), itself what `qkv generate` prints for the fixture. A
// load cancelled midway and a folder that is not there (HTTP 404: the status and the URL shown) leave the model
// loaded before working. Run build:web and build:demo first.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext, Page } from "playwright-core";
import { preview, type Plugin, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DemoState } from "../../demo/src/main.js";
import { init, LanguageModel } from "../../web/dist/node.js";
import { launch } from "./chromium.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const artifacts = path.join(root, "tests/e2e/artifacts");
const FOLDER = path.join(root, "tests/fixtures/import/gpt2_tok");
const FILES = ["config.json", "tokenizer.json", "model.safetensors"];
/** The fixture's prompt and length: its script checked that each greedy choice wins by more than 1e-3. */
const PROMPT = readFileSync(path.join(root, "tests/fixtures/import/gpt2_tok.prompt.txt"), "utf8");
const NEW_TOKENS = 8;

/**
 * Serves the fixture folder at /models/gpt2_tok/ with its Content-Length (so the page knows each file's size)
 * and answers a real 404 for any other /models/ path (vite preview would answer its index.html).
 */
function modelFolder(): Plugin {
  return {
    name: "qkv-e2e-model-folder",
    configurePreviewServer(server) {
      server.middlewares.use("/models/", (req, res) => {
        const [folder, file, ...rest] = (req.url ?? "").split("?")[0]!.replace(/^\//, "").split("/");
        // "notok": the folder without its tokenizer (its weights as "slow"'s).
        const served = folder === "notok" ? FILES.filter((f) => f !== "tokenizer.json") : FILES;
        if (!(folder === "gpt2_tok" || folder === "slow" || folder === "notok") || rest.length || !served.includes(file!)) {
          res.statusCode = 404;
          res.setHeader("Content-Type", "text/plain");
          res.end("not found");
          return;
        }
        const bytes = readFileSync(path.join(FOLDER, file!));
        res.statusCode = 200;
        res.setHeader("Content-Type", file!.endsWith(".json") ? "application/json" : "application/octet-stream");
        res.setHeader("Content-Length", String(bytes.length));
        // "slow": the weights' first KiB, then nothing until the page gives up (Cancel).
        if (folder !== "gpt2_tok" && file === "model.safetensors") res.write(bytes.subarray(0, 1024));
        else res.end(bytes);
      });
    },
  };
}

let server: PreviewServer;
let context: BrowserContext;
let page: Page;
let userDataDir: string;
let base: string;
const consoleErrors: string[] = [];
/** The package's own greedy continuation of PROMPT, in Node. */
let expected: string;

const pretrained = (p: Page = page) => p.evaluate(() => window.__qkv!.pretrained);

beforeAll(async () => {
  if (!existsSync(path.join(root, "demo/dist/index.html"))) {
    throw new Error("demo/dist is missing: run `npm run build:web && npm run build:demo` first");
  }
  await init();
  const lm = await LanguageModel.fromPretrained(
    Object.fromEntries(FILES.map((f) => [f, new Uint8Array(readFileSync(path.join(FOLDER, f)))])),
  );
  expected = await lm.generate(PROMPT, { maxTokens: NEW_TOKENS, temperature: 0 });
  lm.dispose();
  // What `qkv generate` prints for the same folder and prompt (the fixture script's PyTorch greedy ids, decoded).
  expect(PROMPT + expected + "\n").toBe(readFileSync(path.join(root, "tests/fixtures/import/gpt2_tok.generate.txt"), "utf8"));

  server = await preview({
    configFile: path.join(root, "demo/vite.config.ts"),
    logLevel: "warn",
    plugins: [modelFolder()],
    preview: { host: "127.0.0.1", port: 0, strictPort: false, open: false },
  });
  base = server.resolvedUrls!.local[0]!;
  userDataDir = mkdtempSync(path.join(os.tmpdir(), "qkv-e2e-pt-"));
  context = await launch(userDataDir, { width: 1280, height: 1000 });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(`${m.text()} (${m.location().url})`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`pageerror: ${e.message}`));
  // Counts what the page posts to qkv's Worker: each message's type and the length of the tokenizer JSON it
  // carries (a `tokenizer` call's input, or an encode/decode's), so the test sees the JSON cross once.
  await page.addInitScript(() => {
    const posts: { type: string; json: number }[] = [];
    Object.assign(window, { __posts: posts });
    const post = Worker.prototype.postMessage;
    Worker.prototype.postMessage = function (this: Worker, m: unknown, t?: unknown) {
      const r = m as { type?: string; in?: { json?: unknown; tokenizer?: unknown } } | null;
      const ref = r?.in?.tokenizer;
      const json = r?.type === "tokenizer" ? r.in?.json : typeof ref === "string" ? ref : (ref as { json?: unknown } | undefined)?.json;
      posts.push({ type: String(r?.type), json: typeof json === "string" ? json.length : 0 });
      return post.call(this, m, t as Transferable[]);
    } as typeof Worker.prototype.postMessage;
  });
  await page.goto(base);
  await page.waitForFunction(() => window.__qkv?.threaded != null || window.__qkv?.error != null, null, { timeout: 30_000 });
  expect((await page.evaluate(() => window.__qkv)).error).toBeNull();
});

afterAll(async () => {
  await context?.close();
  await server?.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
});

/** Waits for the load started after `loads` loads had ended; on failure saves a screenshot and says why. */
async function settled(what: string, loads: number, p: Page = page): Promise<DemoState["pretrained"]> {
  try {
    await p.waitForFunction((n) => window.__qkv!.pretrained.loads > n, loads, { timeout: 60_000, polling: 100 });
  } catch (e) {
    mkdirSync(artifacts, { recursive: true });
    await p.screenshot({ path: path.join(artifacts, "demo-pretrained-failed.png"), fullPage: true }).catch(() => {});
    throw new Error(`waiting for ${what}: ${(e as Error).message}\nstate: ${JSON.stringify(await pretrained(p).catch(() => undefined))}`);
  }
  return pretrained(p);
}

/** Writes after PROMPT greedily and returns the new text the page shows (checked against the state). */
async function writeGreedy(): Promise<string> {
  const before = (await pretrained()).generations;
  await page.fill("#pt-prompt", PROMPT);
  await page.fill("#pt-temperature", "0");
  await page.fill("#pt-length", String(NEW_TOKENS));
  await page.click("#pt-generate");
  await page.waitForFunction((n) => window.__qkv!.pretrained.generations > n, before, { timeout: 60_000 });
  const s = await pretrained();
  expect(s.error).toBeNull();
  expect(s.state).toBe("ready");
  expect(await page.textContent("#pt-output")).toBe(PROMPT + s.output);
  expect(s.tokens).toBe(NEW_TOKENS); // no stop token in this vocabulary's greedy run
  expect(s.tokensPerSecond).toBeGreaterThan(0);
  expect(await page.textContent("#pt-stats")).toContain(s.tokensPerSecond.toFixed(1));
  return s.output;
}

function expectFullProgress(s: DemoState["pretrained"]): void {
  expect(s.files.map((f) => f.file)).toEqual(FILES);
  for (const f of s.files) {
    const bytes = statSync(path.join(FOLDER, f.file)).size;
    expect(f, f.file).toEqual({ file: f.file, loaded: bytes, total: bytes });
  }
}

describe("demo: a pretrained GPT-2 in the language-model tab", () => {
  it("loads the folder by URL, shows each file's progress, and streams the package's greedy text", async () => {
    expect(expected.length).toBeGreaterThan(0);
    const loads = (await pretrained()).loads;
    const posts = () => page.evaluate(() => (window as unknown as { __posts: { type: string; json: number }[] }).__posts);
    const from = (await posts()).length;
    await page.fill("#pt-url", `${base}models/gpt2_tok/`);
    await page.click("#pt-load-url");
    const s = await settled("the load by URL", loads);
    expect(s.error).toBeNull();
    expect(s.state).toBe("ready");
    expectFullProgress(s);
    // The bars show it too: each at its maximum.
    const bars = await page.$$eval("#pt-progress progress", (els) => els.map((e) => [(e as HTMLProgressElement).value, (e as HTMLProgressElement).max]));
    expect(bars).toEqual(FILES.map((f) => [statSync(path.join(FOLDER, f)).size, statSync(path.join(FOLDER, f)).size]));
    // It is the tab's model now: the tab's facts name it and its BPE tokenizer (657 tokens).
    expect(await page.textContent("#lm-model")).toContain(`${base}models/gpt2_tok/`);
    expect(await page.textContent("#lm-model")).toMatch(/tokenizer\s*bpe, 657 tokens/);
    // Train goes on with the tab's batch, on windows of the model's context (48 tokens, under the 128 a pretrained
    // GPT-2's 1024 are cut to).
    expect(await page.textContent("#lm-model")).toMatch(/training\s*batch 8 × 48 tokens, AdamW/);

    expect(await writeGreedy()).toBe(expected);
    // The tokenizer's JSON crossed to the Worker once (tokenizer.json, to build it), though the tab encoded its
    // text with it and the stream decoded after every token.
    const sent = (await posts()).slice(from);
    const tokenizerCalls = sent.filter((m) => m.type === "encode" || m.type === "decode");
    expect(tokenizerCalls.length).toBeGreaterThan(NEW_TOKENS);
    expect(sent.filter((m) => m.json > 0)).toEqual([{ type: "tokenizer", json: readFileSync(path.join(FOLDER, "tokenizer.json"), "utf8").length }]);
    mkdirSync(artifacts, { recursive: true });
    await page.locator("#pt-panel").screenshot({ path: path.join(artifacts, "demo-pretrained.png") });
    // Nothing in the section is wider than the page at 1280 px.
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(1280);
    expect(consoleErrors).toEqual([]);
  });

  it("loads the same folder through the file input and writes the same text", async () => {
    const loads = (await pretrained()).loads;
    await page.setInputFiles(
      "#pt-files",
      FILES.map((f) => ({ name: f, mimeType: "application/octet-stream", buffer: readFileSync(path.join(FOLDER, f)) })),
    );
    const s = await settled("the load from files", loads);
    expect(s.error).toBeNull();
    expect(s.state).toBe("ready");
    expectFullProgress(s);
    expect(s.source).toMatch(/^3 files \(config\.json, tokenizer\.json, model\.safetensors\)$/);
    expect(await writeGreedy()).toBe(expected);
    expect(consoleErrors).toEqual([]);
  });

  it("loads the files dropped on the panel", async () => {
    // A drop as the browser makes it, with the three files (read from the test server in the page).
    const dropped = await page.evaluateHandle(async (names) => {
      const dt = new DataTransfer();
      for (const n of names) dt.items.add(new File([await (await fetch(`models/gpt2_tok/${n}`)).blob()], n));
      return dt;
    }, FILES);
    const loads = (await pretrained()).loads;
    await page.dispatchEvent("#pt-panel", "dragover", { dataTransfer: dropped });
    expect(await page.getAttribute("#pt-panel", "class")).toContain("dragging");
    await page.dispatchEvent("#pt-panel", "drop", { dataTransfer: dropped });
    const s = await settled("the load of the dropped files", loads);
    expect(s.error).toBeNull();
    expect(s.state).toBe("ready");
    expectFullProgress(s);
    expect(await page.getAttribute("#pt-panel", "class")).not.toContain("dragging");
    expect(await writeGreedy()).toBe(expected);
    expect(consoleErrors).toEqual([]);
  });

  it("cancels a load under way, and keeps the model it had", async () => {
    const loads = (await pretrained()).loads;
    await page.fill("#pt-url", `${base}models/slow/`);
    await page.click("#pt-load-url");
    await page.waitForFunction(() => window.__qkv!.pretrained.files.some((f) => f.file === "model.safetensors" && f.loaded > 0));
    expect(await page.isEnabled("#pt-cancel")).toBe(true);
    expect(await page.isDisabled("#pt-generate")).toBe(true); // no writing while a load runs
    const loading = (await pretrained()).files.find((f) => f.file === "model.safetensors")!;
    expect(loading).toEqual({ file: "model.safetensors", loaded: 1024, total: statSync(path.join(FOLDER, "model.safetensors")).size });
    expect(await page.textContent("#pt-progress")).toContain("1.0 KiB of 72.0 KiB");
    await page.click("#pt-cancel");
    const s = await settled("the cancelled load", loads);
    expect(s.state).toBe("error");
    expect(s.error).toBe("Loading cancelled (cancelled by the user)");
    expect(await page.textContent("#pt-error")).toBe(s.error);
    expect(await page.isDisabled("#pt-cancel")).toBe(true);
    expect(await writeGreedy()).toBe(expected);
    expect(consoleErrors).toEqual([]);
  });

  it("shows the HTTP status and the URL of a folder that is not there, and keeps working", async () => {
    const loads = (await pretrained()).loads;
    const missing = `${base}models/no-such-model/`;
    await page.fill("#pt-url", missing);
    await page.click("#pt-load-url");
    const s = await settled("the error of a missing folder", loads);
    expect(s.state).toBe("error");
    expect(s.error).toContain(`${missing}config.json`);
    expect(s.error).toContain("HTTP 404");
    expect(await page.textContent("#pt-error")).toBe(s.error);
    expect(await page.getAttribute("#pt-error", "role")).toBe("alert");
    // The model loaded before is still the tab's: it writes the same text.
    expect(await writeGreedy()).toBe(expected);
    // The 404 is the browser's own console message for the failed fetch; nothing else is logged.
    expect(consoleErrors.filter((e) => !/404/.test(e))).toEqual([]);
  });

  it("refuses a folder without a tokenizer when its weights begin to arrive, not after them", async () => {
    const loads = (await pretrained()).loads;
    const folder = `${base}models/notok/`;
    await page.fill("#pt-url", folder);
    await page.click("#pt-load-url");
    // The weights' first KiB arrives and then nothing more: only the refusal can end this load.
    const s = await settled("the refusal of a folder without a tokenizer", loads);
    expect(s.state).toBe("error");
    expect(s.error).toBe(`${folder} has no tokenizer (tokenizer.json, or vocab.json and merges.txt): this demo writes text, so it needs one`);
    expect(s.files.find((f) => f.file === "model.safetensors")!.loaded).toBeLessThan(statSync(path.join(FOLDER, "model.safetensors")).size);
    expect(await writeGreedy()).toBe(expected);
    expect(consoleErrors.filter((e) => !/404/.test(e))).toEqual([]);
  });

  it("lets go of the pretrained model's facts when the tab makes a new model", async () => {
    const loads = (await pretrained()).loads;
    await page.fill("#pt-url", `${base}models/gpt2_tok/`);
    await page.click("#pt-load-url");
    expect((await settled("the load by URL", loads)).state).toBe("ready");
    expect(await page.textContent("#pt-model")).toContain(`${base}models/gpt2_tok/`);
    await page.click("#lm-new");
    await page.waitForFunction(() => window.__qkv!.pretrained.state === "idle", null, { timeout: 30_000 });
    expect((await pretrained()).source).toBe("");
    expect(await page.textContent("#pt-model")).toBe("");
    expect(await page.textContent("#pt-error")).toMatch(/^The tab's model changed: Write now writes with it/);
    expect(await page.textContent("#lm-model")).toMatch(/tokenizer\s*char/);
    expect(consoleErrors.filter((e) => !/404/.test(e))).toEqual([]);
  });
});
