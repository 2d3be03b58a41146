// Every WGSL kernel of web/src/webgpu/kernels.ts against a JS port of the reference executor's loops, in Debian's
// headless Chromium with WebGPU on SwiftShader (the CPU): webgpu-kernels.page.ts, bundled with esbuild and served
// from 127.0.0.1 (a secure context: a data: or file: page has no navigator.gpu). Per case the page reports the max
// relative error (its measure is described there) and the tolerance: 1e-5, or 0 where the op is exact (copies,
// fills, dropout masks, argmax).
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launch } from "./chromium.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

interface CaseResult {
  op: string;
  shape: string;
  err: number;
  tol: number;
}

let server: Server;
let context: BrowserContext;
let page: Page;
let dir: string;

beforeAll(async () => {
  const bundle = await build({
    entryPoints: [path.join(root, "tests/e2e/webgpu-kernels.page.ts")],
    bundle: true,
    format: "esm",
    target: "es2022",
    write: false,
    logLevel: "warning",
  });
  const js = bundle.outputFiles[0]!.text;
  const html = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><script type="module" src="/page.js"></script>`;
  server = createServer((req, res) => {
    if (req.url === "/page.js") res.writeHead(200, { "content-type": "text/javascript" }).end(js);
    else res.writeHead(200, { "content-type": "text/html" }).end(html);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  dir = mkdtempSync(path.join(os.tmpdir(), "qkv-webgpu-"));
  context = await launch(dir, undefined, { webgpu: true });
  page = await context.newPage();
  await page.goto(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  await page.waitForFunction(() => typeof window.runKernels === "function");
});

afterAll(async () => {
  await context?.close();
  server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const SUITES = (process.env.QKV_WEBGPU_SUITES ?? "fill,copyRows,add,gemm,layernorm,layernormBackward,biasAct,dropout,attention,embedding,meanPool,crossEntropy,argmax,adam,sumSquares,quant").split(",");

describe("WebGPU kernels against the reference executor's loops", () => {
  it("every kernel, ragged shapes", async () => {
    const out = await page.evaluate((names) => window.runKernels(names), SUITES);
    const lines = out.results.map((r: CaseResult) => `${r.err <= r.tol ? "ok  " : "FAIL"} ${r.op.padEnd(28)} ${r.shape.padEnd(48)} err ${r.err.toExponential(2)} (tol ${r.tol})`);
    console.log(`adapter: ${out.adapter}\n${lines.join("\n")}`);
    expect(out.error).toBeUndefined();
    const failed = out.results.filter((r: CaseResult) => !(r.err <= r.tol));
    expect(failed).toEqual([]);
    const ops = new Set(out.results.map((r: CaseResult) => r.op));
    if (!process.env.QKV_WEBGPU_SUITES) expect(ops.size).toBe(27); // 26 kernel ops + the unknown-op check
  });
});
