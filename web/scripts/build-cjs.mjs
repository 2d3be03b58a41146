// The CommonJS entry for Node (`require("qkv")`): web/src/node.ts bundled by esbuild into web/dist/node.cjs,
// and the declarations copied to web/dist/cjs/ (a "type": "commonjs" folder, so TypeScript reads them as
// CommonJS for a `require` under moduleResolution node16/nodenext). Run after tsc (it copies tsc's .d.ts).
//
// node.cjs sits beside node.js and behaves as if it were node.js: `import.meta.url` is replaced by this
// file's own file: URL, so `new URL("./wasm/", import.meta.url)` still finds web/dist/wasm/.
import { copyFileSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const dist = path.join(root, "web/dist");

await build({
  entryPoints: [path.join(root, "web/src/node.ts")],
  outfile: path.join(dist, "node.cjs"),
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  sourcemap: true,
  logLevel: "warning",
  define: { "import.meta.url": "__qkvImportMetaUrl" },
  banner: { js: 'const __qkvImportMetaUrl = require("node:url").pathToFileURL(__filename).href;' },
});

const types = path.join(dist, "cjs");
rmSync(types, { recursive: true, force: true });
mkdirSync(types);
const declarations = readdirSync(dist).filter((f) => f.endsWith(".d.ts"));
if (!declarations.includes("index.d.ts")) {
  console.error("build:web: web/dist/index.d.ts is missing: run tsc -p web/tsconfig.json first");
  process.exit(1);
}
for (const f of declarations) copyFileSync(path.join(dist, f), path.join(types, f));
writeFileSync(path.join(types, "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
console.log(`build:web: web/dist/node.cjs and ${declarations.length} declarations in web/dist/cjs/`);
