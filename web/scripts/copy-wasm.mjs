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
// Emscripten 3.1.6's glue indexes a thrown C++ exception's reference count with a signed shift (`this.ptr+0>>2` in
// ExceptionInfo's add_ref and release_ref, where its other heap accesses shift unsigned): with the 4 GiB heap, an
// exception object above 2 GiB gives a negative index, and Atomics.add throws "RangeError: Invalid atomic access
// index" in place of the C++ exception's message (LanguageModel.create of a model near the heap's size did). Each
// threaded glue must have both, so that a glue that changed is looked at again rather than passed through.
const patches = [{ from: "this.ptr+0>>2,", to: "this.ptr+0>>>2,", threaded: 2 }];
function patched(file, code) {
  for (const { from, to, threaded } of patches) {
    const n = code.split(from).length - 1;
    const want = file === "build/wasm/qkv.js" ? threaded : n;
    if (n !== want) {
      console.error(`build:web: ${file} has ${n} of ${JSON.stringify(from)}, expected ${want}: review the glue's patch`);
      process.exit(1);
    }
    code = code.replaceAll(from, to);
  }
  return code;
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
  const glue = patched(f, readFileSync(path.join(root, f), "utf8"));
  const { code } = transformSync(glue, { minify: true, target: "es2020", legalComments: "none" });
  writeFileSync(to, code);
}
// The Emscripten glue is UMD/CommonJS: keep Node from reading it as ESM (the root package is "type": "module").
writeFileSync(path.join(out, "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
console.log(`build:web: copied ${files.length} files to ${path.relative(root, out)}/ (the glue minified)`);
