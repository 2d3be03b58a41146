// Copies the wasm build outputs (CMake/em++) into web/dist/wasm/, where the package's loaders look for them.
// Fails, naming the missing file, when a build output is absent.
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const files = [
  "build/wasm/qkv.js",
  "build/wasm/qkv.wasm",
  "build/wasm/qkv.worker.js",
  "build/wasm-st/qkv-st.js",
  "build/wasm-st/qkv-st.wasm",
];
const missing = files.filter((f) => !existsSync(path.join(root, f)));
if (missing.length > 0) {
  console.error(
    `build:web: missing wasm build output: ${missing.join(", ")}\n` +
      "build it first with `bash scripts/build-wasm.sh` (threaded and single-threaded builds)",
  );
  process.exit(1);
}
const out = path.join(root, "web/dist/wasm");
mkdirSync(out, { recursive: true });
for (const f of files) copyFileSync(path.join(root, f), path.join(out, path.basename(f)));
// The Emscripten glue is UMD/CommonJS: keep Node from reading it as ESM (the root package is "type": "module").
writeFileSync(path.join(out, "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
console.log(`build:web: copied ${files.length} files to ${path.relative(root, out)}/`);
