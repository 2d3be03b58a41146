import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// Vitest in Node against the real .wasm, through the package's Node entry (web/dist, built by `npm run build:web`).
export default defineConfig({
  root: fileURLToPath(new URL("../..", import.meta.url)),
  test: {
    include: ["tests/web/**/*.test.ts"],
    environment: "node",
    // Each file in its own child process: the core (and its pthread pool) is loaded once per process.
    pool: "forks",
    testTimeout: 120_000,
    hookTimeout: 120_000,
    teardownTimeout: 10_000,
  },
});
