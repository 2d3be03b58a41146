import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// Vitest in Node against the real .wasm, through the package's Node entry (web/dist, built by `npm run build:web`).
//
// The loader picks the relaxed-SIMD builds where the engine has relaxed SIMD, which Node 20 (this project's
// machines) has only behind a V8 flag. So a plain run tests the plain builds, and QKV_TEST_RELAXED_SIMD=1
// (scripts/test.sh runs both) runs the files again with the flag, on the relaxed builds: every file that computes
// with the core's kernels (the relaxed .wasm differs from the plain one in its kernel unit alone), not the ones that
// test only tokenizers (their code is not in that unit), the package's files and exports, or the WebGPU protocol.
const relaxed = process.env.QKV_TEST_RELAXED_SIMD === "1";
const KERNEL_FREE = ["bpe_tokenizer", "tokenizer", "tokenizer-worker", "package", "modules", "webgpu-protocol"];
const NODE_HAS_RELAXED = Number(process.versions.node.split(".")[0]) >= 22;

export default defineConfig({
  root: fileURLToPath(new URL("../..", import.meta.url)),
  test: {
    include: ["tests/web/**/*.test.ts"],
    exclude: relaxed ? KERNEL_FREE.map((name) => `tests/web/${name}.test.ts`) : [],
    environment: "node",
    // Each file in its own child process: the core (and its pthread pool) is loaded once per process.
    pool: "forks",
    poolOptions: { forks: { execArgv: relaxed && !NODE_HAS_RELAXED ? ["--experimental-wasm-relaxed-simd"] : [] } },
    testTimeout: 120_000,
    hookTimeout: 120_000,
    teardownTimeout: 10_000,
  },
});
