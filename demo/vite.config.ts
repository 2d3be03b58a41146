import path from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = path.dirname(fileURLToPath(import.meta.url));

/** The two headers that make the page cross-origin isolated, so that wasm threads (SharedArrayBuffer) work. */
export const isolationHeaders = {
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Embedder-Policy": "require-corp",
};

export const DEMO_PORT = 5173;

export default defineConfig({
  root: here,
  base: "./",
  resolve: {
    // The built package (npm run build:web), as an app that installed "qkv" would get it.
    alias: { qkv: path.resolve(here, "../web/dist/browser.js") },
  },
  // qkv's worker is a classic worker (it loads the Emscripten glue with importScripts).
  worker: { format: "iife" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
  },
  server: { headers: isolationHeaders, host: "127.0.0.1", port: DEMO_PORT, strictPort: true },
  preview: { headers: isolationHeaders, host: "127.0.0.1", port: DEMO_PORT, strictPort: true },
});
