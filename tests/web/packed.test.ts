// The tarball `npm pack` makes: what a user installs. It carries the LICENSE that package.json's "license"
// names, the README, the built package (every module with its declarations, the Worker, the glue and the four
// .wasm files) and its TypeScript sources, and nothing else: no tests, no C++, no build trees.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

describe("packed package", () => {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const out = execFileSync(npm, ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" });
  const files = (JSON.parse(out) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path).sort();

  it("carries the MIT LICENSE that package.json names", () => {
    const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { license: string };
    expect(pkg.license).toBe("MIT");
    expect(files).toContain("LICENSE");
    expect(readFileSync(path.join(root, "LICENSE"), "utf8")).toMatch(/^MIT License\n/);
    expect(files).toContain("README.md");
    expect(files).toContain("package.json");
  });

  it("carries the built entries, the Worker, the GPU worker, the glue and the four .wasm files", () => {
    for (const f of [
      "web/dist/index.js",
      "web/dist/index.d.ts",
      "web/dist/node.js",
      "web/dist/node.cjs",
      "web/dist/browser.js",
      "web/dist/worker.js",
      "web/dist/gpu-worker.js",
      "web/dist/cjs/index.d.ts",
      "web/dist/wasm/qkv.js",
      "web/dist/wasm/qkv.worker.js",
      "web/dist/wasm/qkv.wasm",
      "web/dist/wasm/qkv-relaxed.wasm",
      "web/dist/wasm/qkv-st.js",
      "web/dist/wasm/qkv-st.wasm",
      "web/dist/wasm/qkv-st-relaxed.wasm",
    ])
      expect(files).toContain(f);
  });

  it("carries nothing but those: no tests, C++, build trees or fixtures", () => {
    const stray = files.filter((f) => !/^(LICENSE|README\.md|package\.json|web\/(dist|src)\/.+)$/.test(f));
    expect(stray).toEqual([]);
  });
});
