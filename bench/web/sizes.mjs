// Download size of each library in a browser app: the JavaScript a minimal app imports, bundled and minified
// the same way for all three (esbuild --bundle --minify, ESM, browser platform), plus every file the library
// fetches at run time (.wasm, glue, workers), each gzipped (level 9) and brotli-compressed (quality 11).
//
// usage: node bench/web/sizes.mjs [--dir build/bench-web]   (after npm run build:web and npm ci --prefix bench/web)
// prints one table and `RESULT {json}` per library and build.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { HERE, ROOT, option, packageVersion, result } from "./lib.mjs";

const dir = path.resolve(option("dir", path.join(ROOT, "build", "bench-web")));
const work = path.join(dir, "sizes");
mkdirSync(work, { recursive: true });
const esbuild = path.join(ROOT, "node_modules", ".bin", "esbuild");
if (!existsSync(esbuild)) throw new Error(`${esbuild} is missing: run npm ci in the repository root`);
const peer = (p) => path.join(HERE, "node_modules", p);

/** Bundles `source` (an app's imports, resolved from bench/web) like an app's production build; returns the output path. */
function bundle(name, source) {
  const out = path.join(work, `${name}-app.min.js`);
  // Node built-ins that browser-unaware glue mentions behind environment checks are left out, as a bundler's
  // browser build does (TF.js lists them in its package.json "browser" field; qkv's browser entry has none).
  const external = ["fs", "path", "os", "worker_threads", "perf_hooks", "crypto", "url", "module"].map((m) => `--external:${m}`);
  execFileSync(esbuild, ["--bundle", "--minify", "--format=esm", "--platform=browser", "--target=es2020", `--sourcefile=${name}-app.mjs`, `--outfile=${out}`, "--log-level=error", ...external], {
    cwd: HERE,
    input: source,
    stdio: ["pipe", "inherit", "inherit"],
  });
  return out;
}

function measure(file) {
  const bytes = readFileSync(file);
  return {
    raw: bytes.length,
    gzip: zlib.gzipSync(bytes, { level: 9 }).length,
    brotli: zlib.brotliCompressSync(bytes, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11 } }).length,
  };
}

// Each library: the builds a browser app may load, each a list of [what, file].
const qkvDist = path.join(ROOT, "web", "dist");
const qkvApp = () => bundle("qkv", `import { init, LanguageModel } from ${JSON.stringify(path.join(qkvDist, "browser.js"))};\nexport { init, LanguageModel };\n`);
const tfApp = () =>
  bundle("tfjs", `import * as tf from "@tensorflow/tfjs-core";\nimport { setWasmPaths } from "@tensorflow/tfjs-backend-wasm";\nexport { tf, setWasmPaths };\n`);
const ortApp = () => bundle("ort", `import * as ort from "onnxruntime-web/wasm";\nexport { ort };\n`);

const libraries = [
  {
    name: "qkv",
    version: JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")).version,
    how: "import { init, LanguageModel } from \"qkv\" (browser entry; training and inference)",
    builds: () => {
      const app = qkvApp();
      const w = (f) => path.join(qkvDist, f);
      return [
        { build: "threaded (SIMD + pthreads)", files: [["app JS (bundled)", app], ["worker.js (the core's Worker)", w("worker.js")], ["wasm/qkv.js (glue)", w("wasm/qkv.js")], ["wasm/qkv.worker.js (pthread)", w("wasm/qkv.worker.js")], ["wasm/qkv.wasm", w("wasm/qkv.wasm")]] },
        { build: "single-threaded (SIMD)", files: [["app JS (bundled)", app], ["worker.js (the core's Worker)", w("worker.js")], ["wasm/qkv-st.js (glue)", w("wasm/qkv-st.js")], ["wasm/qkv-st.wasm", w("wasm/qkv-st.wasm")]] },
      ];
    },
  },
  {
    name: "TF.js",
    version: packageVersion("@tensorflow/tfjs-core"),
    how: "@tensorflow/tfjs-core + @tensorflow/tfjs-backend-wasm (training needs core's gradients; no layers/converter)",
    builds: () => {
      const app = tfApp();
      const w = (f) => peer(`@tensorflow/tfjs-backend-wasm/dist/${f}`);
      return [
        { build: "threaded SIMD", files: [["app JS (bundled; glue and pthread worker inlined)", app], ["tfjs-backend-wasm-threaded-simd.wasm", w("tfjs-backend-wasm-threaded-simd.wasm")]] },
        { build: "SIMD (single-threaded)", files: [["app JS (bundled)", app], ["tfjs-backend-wasm-simd.wasm", w("tfjs-backend-wasm-simd.wasm")]] },
      ];
    },
  },
  {
    name: "TF.js (whole)",
    version: packageVersion("@tensorflow/tfjs"),
    how: "the prebuilt dist/tf.min.js of @tensorflow/tfjs (core, layers, converter, data, cpu + webgl) + backend-wasm",
    builds: () => [
      { build: "threaded SIMD", files: [["tf.min.js", peer("@tensorflow/tfjs/dist/tf.min.js")], ["tf-backend-wasm.min.js", peer("@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js")], ["tfjs-backend-wasm-threaded-simd.wasm", peer("@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-threaded-simd.wasm")]] },
    ],
  },
  {
    name: "ONNX Runtime Web",
    version: packageVersion("onnxruntime-web"),
    how: "import * as ort from \"onnxruntime-web/wasm\" (inference only; glue bundled in; one .wasm for threaded and not)",
    builds: () => {
      const app = ortApp();
      return [{ build: "SIMD (threads when isolated)", files: [["app JS (bundled)", app], ["ort-wasm-simd-threaded.wasm", peer("onnxruntime-web/dist/ort-wasm-simd-threaded.wasm")]] }];
    },
  },
];

const kib = (n) => (n / 1024).toFixed(1);
const rows = [];
for (const lib of libraries) {
  for (const b of lib.builds()) {
    const files = b.files.map(([what, f]) => ({ what, file: path.relative(ROOT, f), ...measure(f) }));
    const total = files.reduce((t, f) => ({ raw: t.raw + f.raw, gzip: t.gzip + f.gzip, brotli: t.brotli + f.brotli }), { raw: 0, gzip: 0, brotli: 0 });
    rows.push({ lib, build: b.build, files, total });
  }
}

console.log("\n== Download size in a browser app (KiB; gzip -9 and brotli q11 of each file; JS bundled with esbuild --minify)");
console.log(`${"library".padEnd(24)} ${"build".padEnd(30)} ${"file".padEnd(52)} ${"raw".padStart(9)} ${"gzip".padStart(9)} ${"brotli".padStart(9)}`);
for (const r of rows) {
  for (const f of r.files) console.log(`${`${r.lib.name} ${r.lib.version}`.padEnd(24)} ${r.build.padEnd(30)} ${f.what.padEnd(52)} ${kib(f.raw).padStart(9)} ${kib(f.gzip).padStart(9)} ${kib(f.brotli).padStart(9)}`);
  console.log(`${"".padEnd(24)} ${"".padEnd(30)} ${"= total".padEnd(52)} ${kib(r.total.raw).padStart(9)} ${kib(r.total.gzip).padStart(9)} ${kib(r.total.brotli).padStart(9)}`);
}
for (const r of rows) {
  result({ bench: "size", library: r.lib.name, version: r.lib.version, how: r.lib.how, build: r.build, raw: r.total.raw, gzip: r.total.gzip, brotli: r.total.brotli, files: r.files });
}
