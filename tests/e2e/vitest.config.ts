import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// In Debian's headless Chromium: the built demo (demo/dist), web/dist as plain modules, and the packed tarball in
// a fresh Vite app (which that test builds itself). Run build:web and build:demo first.
export default defineConfig({
  root: fileURLToPath(new URL("../..", import.meta.url)),
  test: {
    include: ["tests/e2e/**/*.test.ts"],
    environment: "node",
    pool: "forks",
    // One browser at a time: the demo's timing must not share the 2 cores with another test file.
    fileParallelism: false,
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
});
