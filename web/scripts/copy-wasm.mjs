// Copies the wasm build outputs (CMake/em++) into web/dist/wasm/, where the package's loaders look for them,
// minifying the Emscripten glue on the way. Fails, naming the missing file, when a build output is absent.
//
// Minified by esbuild because Debian's Emscripten cannot run Closure (`--closure 1` looks for a
// `closure-compiler` executable; Debian's is from 2013): Emscripten only strips the glue's whitespace. esbuild
// renames local identifiers only, never properties or the global `createQkvCore` the pthread workers look up;
// the threaded glue goes from 26.6 to 20.5 KB gzipped, the single-threaded one from 19.2 to 14.8 KB.
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { transformSync } from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const files = [
  "build/wasm/qkv.js",
  "build/wasm/qkv.wasm",
  "build/wasm/qkv-relaxed.wasm",
  "build/wasm/qkv.worker.js",
  "build/wasm-st/qkv-st.js",
  "build/wasm-st/qkv-st.wasm",
  "build/wasm-st/qkv-st-relaxed.wasm",
];
// The relaxed-SIMD builds ship without their glue: the loaders run them under the plain build's, so the
// two must be the same but for the file names they mention.
const sameGlue = [
  ["build/wasm/qkv.js", "build/wasm/qkv-relaxed.js"],
  ["build/wasm/qkv.worker.js", "build/wasm/qkv-relaxed.worker.js"],
  ["build/wasm-st/qkv-st.js", "build/wasm-st/qkv-st-relaxed.js"],
];
const missing = files.filter((f) => !existsSync(path.join(root, f)));
if (missing.length > 0) {
  console.error(
    `build:web: missing wasm build output: ${missing.join(", ")}\n` +
      "build it first with `bash scripts/build-wasm.sh` (threaded and single-threaded builds)",
  );
  process.exit(1);
}
for (const [plain, relaxed] of sameGlue) {
  const read = (f) => readFileSync(path.join(root, f), "utf8");
  if (!existsSync(path.join(root, relaxed)) || read(relaxed).replaceAll("-relaxed", "") !== read(plain)) {
    console.error(`build:web: ${relaxed} is not ${plain} with its own file names: the relaxed build cannot share the glue`);
    process.exit(1);
  }
}
const out = path.join(root, "web/dist/wasm");
mkdirSync(out, { recursive: true });
for (const f of files) {
  const to = path.join(out, path.basename(f));
  if (!f.endsWith(".js")) {
    copyFileSync(path.join(root, f), to);
    continue;
  }
  // A classic script, not a module: top-level names (createQkvCore) stay global and keep their names.
  const { code } = transformSync(readFileSync(path.join(root, f), "utf8"), { minify: true, target: "es2020", legalComments: "none" });
  writeFileSync(to, code);
}
// The Emscripten glue is UMD/CommonJS: keep Node from reading it as ESM (the root package is "type": "module").
writeFileSync(path.join(out, "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
console.log(`build:web: copied ${files.length} files to ${path.relative(root, out)}/ (the glue minified)`);
