// The package as a consumer sees it: Node resolves "qkv" through the exports map to the Node entry, and the
// browser entry's module graph imports no Node built-in.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { describeCore, type QkvCore } from "../../web/dist/core.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

describe("package", () => {
  it(`import "qkv" in Node loads the threaded core, trains, and lets the process exit`, () => {
    const script = `
      import { init, LanguageModel } from "qkv";
      const info = await init({ threads: 2 });
      const m = await LanguageModel.create({ vocabSize: 5, context: 4, dModel: 8, heads: 2, layers: 1 });
      const { loss } = await m.trainStep(Int32Array.of(0, 1, 2, 3), Int32Array.of(1, 2, 3, 4));
      m.dispose();
      console.log(JSON.stringify({ ...info, loss }));
      // No process.exit(): the process must end by itself (the pthread pool must not hold it open).`;
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { cwd: root, encoding: "utf8", timeout: 60_000 });
    const r = JSON.parse(out.trim().split("\n").at(-1)!) as { threaded: boolean; threads: number; loss: number };
    expect(r.threaded).toBe(true);
    expect(r.threads).toBe(2);
    expect(Math.abs(r.loss - Math.log(5))).toBeLessThan(0.5);
  });

  it(`require("qkv") in CommonJS gets the CommonJS entry, loads the threaded core, trains, and lets the process exit`, () => {
    const script = `
      const { init, LanguageModel, VERSION } = require("qkv");
      (async () => {
        const info = await init({ threads: 2 });
        const m = await LanguageModel.create({ vocabSize: 7, context: 4, dModel: 8, heads: 2, layers: 1 });
        const { loss } = await m.trainStep(Int32Array.of(0, 1, 2, 3), Int32Array.of(1, 2, 3, 4));
        m.dispose();
        console.log(JSON.stringify({ ...info, loss, VERSION, entry: require.resolve("qkv") }));
      })().catch((e) => { console.error(e); process.exitCode = 1; });`;
    // Node 20.19+ can require() an ES module; turn that off so that only a real CommonJS entry passes (as on
    // Node 20.0-20.18, which the package's engines field admits).
    const features = process.features as { require_module?: boolean };
    const flags = features.require_module === undefined ? [] : ["--no-experimental-require-module"];
    const out = execFileSync(process.execPath, [...flags, "-e", script], { cwd: root, encoding: "utf8", timeout: 60_000 });
    const r = JSON.parse(out.trim().split("\n").at(-1)!) as { threaded: boolean; threads: number; loss: number; VERSION: string; entry: string };
    expect(path.relative(root, r.entry)).toBe(path.join("web", "dist", "node.cjs"));
    expect(r.VERSION).toBe("0.1.0");
    expect(r.threaded).toBe(true);
    expect(r.threads).toBe(2);
    expect(Number.isFinite(r.loss)).toBe(true);
    expect(Math.abs(r.loss - Math.log(7))).toBeLessThan(0.2); // 1.92 here
  });

  it("the browser entry imports no Node module", () => {
    const seen = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const src = readFileSync(file, "utf8");
      for (const m of src.matchAll(/(?:import|export)[^"']*?from\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g)) {
        const spec = (m[1] ?? m[2])!;
        expect(spec.startsWith(".") ? spec : `bare import ${spec} in ${file}`).toMatch(/^\./);
        visit(path.resolve(path.dirname(file), spec));
      }
      expect(src).not.toMatch(/\brequire\(|node:/);
    };
    visit(path.join(root, "web/dist/browser.js"));
    expect(seen.size).toBeGreaterThan(3);
    expect([...seen].map((f) => path.basename(f))).not.toContain("node.js");
  });

  it("the package version is checked against the core's", () => {
    const fake = { version: () => "9.9.9", threaded: () => true, numThreads: () => 1, simd: () => "x" } as unknown as QkvCore;
    expect(() => describeCore(fake, 1)).toThrow(/the loaded \.wasm is version 9\.9\.9 but this package is 0\.1\.0/);
  });
});

describe("types", () => {
  it("the published .d.ts type-checks a consumer under --strict with lib ESNext + WebWorker", () => {
    const tsc = path.join(root, "node_modules/typescript/bin/tsc");
    let errors = "";
    try {
      execFileSync(process.execPath, [tsc, "-p", "tests/web/consumer/tsconfig.json"], { cwd: root, encoding: "utf8" });
    } catch (e) {
      errors = String((e as { stdout?: string }).stdout) || String(e);
    }
    expect(errors).toBe("");
  });

  it("a CommonJS consumer (module Node16) gets declarations it can require", () => {
    const tsc = path.join(root, "node_modules/typescript/bin/tsc");
    let errors = "";
    try {
      execFileSync(process.execPath, [tsc, "-p", "tests/web/consumer-cjs/tsconfig.json"], { cwd: root, encoding: "utf8" });
    } catch (e) {
      errors = String((e as { stdout?: string }).stdout) || String(e);
    }
    expect(errors).toBe("");
  });
});
