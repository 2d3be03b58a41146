// Issue 7's shipping test: the tarball `npm pack` makes, installed into a fresh Vite app in a temporary
// folder (outside the repo, offline), built with `vite build` and zero config, then run in headless Chromium:
// threaded where the page is served cross-origin isolated (COOP/COEP), single-threaded where it is not.
// The bundler alone must find the .wasm, the glue and the workers (the package's new URL(..., import.meta.url)).
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext } from "playwright-core";
import { launch } from "./chromium.js";
import { preview, type PreviewServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const isolationHeaders = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" };
const STEPS = 20;

const INDEX_HTML = `<!doctype html>
<html lang="en">
  <head><meta charset="utf-8"><link rel="icon" href="data:,"><title>qkv in a fresh Vite app</title></head>
  <body>
    <pre id="result"></pre>
    <script type="module" src="/src/main.ts"></script>
  </body>
</html>
`;

// What a web developer writes: the bare import, no wasmPath, no copying of build files.
const MAIN_TS = `import { init, LanguageModel } from "qkv";

const out = document.querySelector<HTMLPreElement>("#result")!;
try {
  const info = await init({ threads: 2 });
  const lm = await LanguageModel.create({ vocabSize: 5, context: 4, dModel: 8, heads: 2, layers: 1, lr: 1e-2 });
  const inputs = Int32Array.of(0, 1, 2, 3), targets = Int32Array.of(1, 2, 3, 4);
  const losses: number[] = [];
  for (let i = 0; i < ${STEPS}; i++) losses.push((await lm.trainStep(inputs, targets)).loss);
  lm.dispose();
  out.textContent = JSON.stringify({ info, isolated: globalThis.crossOriginIsolated, losses });
} catch (e) {
  out.textContent = JSON.stringify({ error: String((e as Error)?.stack ?? e) });
}
out.dataset.done = "1";
`;

// create-vite's vanilla-ts tsconfig, in short: its build script is \`tsc && vite build\`.
const TSCONFIG = {
  compilerOptions: {
    target: "ES2022",
    module: "ESNext",
    moduleResolution: "bundler",
    lib: ["ES2022", "DOM", "DOM.Iterable"],
    types: [],
    strict: true,
    noEmit: true,
    skipLibCheck: false,
  },
  include: ["src"],
};

type PageResult = {
  error?: string;
  info: { threaded: boolean; threads: number; simd: string; relaxedSimd: boolean; version: string; backend: string; fallbackReason?: string };
  isolated: boolean;
  losses: number[];
};

let dir: string;
let app: string;
let assets: string[];
let context: BrowserContext;
const servers: PreviewServer[] = [];

function run(cmd: string, args: string[], cwd: string): string {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: "pipe", timeout: 120_000 });
  } catch (e) {
    const x = e as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}: ${x.message}\n${x.stdout ?? ""}\n${x.stderr ?? ""}`);
  }
}

beforeAll(async () => {
  if (!existsSync(path.join(root, "web/dist/browser.js")) || !existsSync(path.join(root, "web/dist/wasm/qkv.wasm"))) {
    throw new Error("web/dist is missing: run `bash scripts/build-wasm.sh && npm run build:web` first");
  }
  dir = mkdtempSync(path.join(os.tmpdir(), "qkv-vite-app-"));
  const tarball = run("npm", ["pack", "--silent", "--pack-destination", dir], root).trim().split("\n").at(-1)!;
  app = path.join(dir, "app");
  mkdirSync(path.join(app, "src"), { recursive: true });
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "fresh-app", private: true, version: "0.0.0", type: "module" }));
  writeFileSync(path.join(app, "index.html"), INDEX_HTML);
  writeFileSync(path.join(app, "src/main.ts"), MAIN_TS);
  writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify(TSCONFIG));
  // The tarball as a consumer installs it (qkv has no dependencies, so nothing needs the network) ...
  run("npm", ["install", "--offline", "--no-audit", "--no-fund", path.join(dir, tarball)], app);
  // ... and vite from the repo (what `npm install -D vite` would put there), linked after the install so npm does not prune it.
  symlinkSync(path.join(root, "node_modules/vite"), path.join(app, "node_modules/vite"), "dir");
  run(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", "."], app);
  run(process.execPath, [path.join(app, "node_modules/vite/bin/vite.js"), "build", "--logLevel", "warn"], app);
  assets = readdirSync(path.join(app, "dist/assets"));
  mkdirSync(path.join(dir, "profile"));
  context = await launch(path.join(dir, "profile"));
}, 180_000);

afterAll(async () => {
  await context?.close();
  for (const s of servers) await s.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Serves the app's dist (with or without the isolation headers), opens it and returns what main.ts wrote. */
async function open(headers: Record<string, string>) {
  const server = await preview({
    configFile: false,
    root: app,
    logLevel: "warn",
    preview: { host: "127.0.0.1", port: 0, strictPort: false, open: false, headers },
  });
  servers.push(server);
  const page = await context.newPage();
  const errors: string[] = [];
  const warnings: string[] = [];
  const wasmLoaded: string[] = [];
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
    if (m.type() === "warning") warnings.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.on("response", (r) => {
    if (r.url().endsWith(".wasm")) wasmLoaded.push(`${r.status()} ${new URL(r.url()).pathname}`);
  });
  const response = await page.goto(server.resolvedUrls!.local[0]!);
  expect(response?.status()).toBe(200);
  await page.waitForSelector("#result[data-done]", { state: "attached", timeout: 60_000 });
  const result = JSON.parse(await page.textContent("#result") ?? "null") as PageResult;
  await page.close();
  return { result, errors, warnings, wasmLoaded };
}

function expectTrained(r: PageResult): void {
  expect(r.error).toBeUndefined();
  expect(r.info.version).toBe("0.1.0");
  expect(r.info.simd).toBe("sse4.1");
  expect(r.info.relaxedSimd).toBe(true); // Chromium has relaxed SIMD since 114
  expect(r.losses).toHaveLength(STEPS);
  expect(r.losses.every(Number.isFinite)).toBe(true);
  expect(Math.abs(r.losses[0]! - Math.log(5))).toBeLessThan(0.5);
  expect(r.losses.at(-1)!).toBeLessThan(0.5 * r.losses[0]!);
}

describe("the packed tarball in a fresh Vite app", () => {
  it("vite build emits the four .wasm, the glue and the workers as assets", () => {
    const has = (re: RegExp) => assets.filter((f) => re.test(f));
    // Vite's content hash: 8 characters of [\w-], so qkv-<hash> and qkv-st-<hash> cannot be confused.
    expect(has(/^qkv-[\w-]{8}\.wasm$/)).toHaveLength(1);
    expect(has(/^qkv-st-[\w-]{8}\.wasm$/)).toHaveLength(1);
    expect(has(/^qkv-relaxed-[\w-]{8}\.wasm$/)).toHaveLength(1);
    expect(has(/^qkv-st-relaxed-[\w-]{8}\.wasm$/)).toHaveLength(1);
    expect(has(/^qkv-[\w-]{8}\.js$/)).toHaveLength(1); // the threaded glue
    expect(has(/^qkv-st-[\w-]{8}\.js$/)).toHaveLength(1);
    expect(has(/^qkv\.worker-[\w-]{8}\.js$/)).toHaveLength(1); // the pthread worker, not inlined
    expect(has(/^worker-[\w-]{8}\.js$/)).toHaveLength(1); // the package's Worker
    expect(has(/^gpu-worker-[\w-]{8}\.js$/)).toHaveLength(1); // its GPU worker (WebGPU)
  });

  it("runs threaded when served with COOP/COEP", async () => {
    const { result, errors, warnings, wasmLoaded } = await open(isolationHeaders);
    expectTrained(result);
    expect(result.isolated).toBe(true);
    expect(result.info.threaded).toBe(true);
    expect(result.info.threads).toBe(2);
    expect(wasmLoaded).toEqual([expect.stringMatching(/^200 \/assets\/qkv-relaxed-[\w-]{8}\.wasm$/)]);
    // The bundled GPU worker started and found no adapter (this Chromium has no WebGPU flags): quietly wasm.
    expect(result.info.backend).toBe("wasm");
    expect(result.info.fallbackReason).toMatch(/requestAdapter\(\) found no GPU adapter/);
    expect(warnings.filter((w) => w.includes("qkv"))).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("falls back to the single-threaded build without them, warning once with the two headers", async () => {
    const { result, errors, warnings, wasmLoaded } = await open({});
    expectTrained(result);
    expect(result.isolated).toBe(false);
    expect(result.info.threaded).toBe(false);
    expect(result.info.threads).toBe(1);
    expect(wasmLoaded).toEqual([expect.stringMatching(/^200 \/assets\/qkv-st-relaxed-[\w-]{8}\.wasm$/)]);
    const fallback = warnings.filter((w) => w.includes("qkv"));
    expect(fallback).toHaveLength(1);
    expect(fallback[0]).toMatch(/Cross-Origin-Opener-Policy: same-origin.*Cross-Origin-Embedder-Policy: require-corp/);
    expect(errors).toEqual([]);
  });
});
