// Browser entry: the core runs in a (classic) Worker that loads the Emscripten glue with importScripts.
// Imports no Node module. The worker and every build file are referenced with new URL(..., import.meta.url)
// so that bundlers (Vite, webpack) emit them as assets; init({ wasmPath }) points elsewhere (a CDN).

import type { LoadPlan } from "./protocol.js";
import { MAX_DEFAULT_THREADS, setPlatform, useRelaxedSimd, type Backend } from "./platform.js";
import { WorkerClient } from "./worker-client.js";
import type { RuntimeInfo } from "./types.js";

let warnedFallback = false;

/** Warns once that the page is not cross-origin isolated, naming the two headers that fix it. */
function warnFallback(): void {
  if (warnedFallback) return;
  warnedFallback = true;
  console.warn(
    "qkv: this page is not cross-origin isolated, so the single-threaded build runs (slower). " +
      "Serve the page with the headers `Cross-Origin-Opener-Policy: same-origin` and " +
      "`Cross-Origin-Embedder-Policy: require-corp` to train with threads.",
  );
}

/** The build files: defaults beside this module, or under `wasmPath`. Both builds of a kind share one glue. */
function plan(
  threaded: boolean,
  threads: number,
  relaxedSimd: boolean,
  wasmPath: string | URL | undefined,
  backend: LoadPlan["backend"],
): LoadPlan {
  const gpu = { backend, gpuWorkerUrl: new URL("./gpu-worker.js", import.meta.url).href };
  if (wasmPath !== undefined) {
    let base = String(wasmPath);
    if (!base.endsWith("/")) base += "/";
    const at = (f: string) => new URL(f, new URL(base, globalThis.location?.href)).href;
    const stem = threaded ? "qkv" : "qkv-st";
    return {
      threaded,
      threads: threaded ? threads : 1,
      glueUrl: at(`${stem}.js`),
      wasmUrl: at(`${stem}${relaxedSimd ? "-relaxed" : ""}.wasm`),
      relaxedSimd,
      ...(threaded ? { pthreadWorkerUrl: at("qkv.worker.js") } : {}),
      ...gpu,
    };
  }
  // Literal new URL(...) calls: bundlers see them and emit the files.
  return threaded
    ? {
        threaded,
        threads,
        glueUrl: new URL("./wasm/qkv.js", import.meta.url).href,
        wasmUrl: relaxedSimd
          ? new URL("./wasm/qkv-relaxed.wasm", import.meta.url).href
          : new URL("./wasm/qkv.wasm", import.meta.url).href,
        relaxedSimd,
        // ?no-inline: Vite would otherwise inline this small script as a data: URL, which cannot host a pthread.
        pthreadWorkerUrl: new URL("./wasm/qkv.worker.js?no-inline", import.meta.url).href,
        ...gpu,
      }
    : {
        threaded,
        threads: 1,
        glueUrl: new URL("./wasm/qkv-st.js", import.meta.url).href,
        wasmUrl: relaxedSimd
          ? new URL("./wasm/qkv-st-relaxed.wasm", import.meta.url).href
          : new URL("./wasm/qkv-st.wasm", import.meta.url).href,
        relaxedSimd,
        ...gpu,
      };
}

setPlatform({
  defaultThreads() {
    const n = typeof navigator !== "undefined" && navigator.hardwareConcurrency ? navigator.hardwareConcurrency : 4;
    return Math.max(1, Math.min(MAX_DEFAULT_THREADS, n));
  },

  async load(options): Promise<{ backend: Backend; info: RuntimeInfo }> {
    const isolated = globalThis.crossOriginIsolated === true;
    if (options.threaded === true && !isolated) {
      throw new Error(
        "qkv: init({ threaded: true }) needs a cross-origin isolated page: serve it with " +
          "`Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`",
      );
    }
    const threaded = options.threaded ?? isolated;
    if (!threaded && options.threaded === undefined) warnFallback();
    const client = new WorkerClient(new Worker(new URL("./worker.js", import.meta.url)));
    try {
      const backend = options.backend ?? "auto";
      if (backend === "webgpu" && !threaded) {
        throw new Error(
          'qkv: init({ backend: "webgpu" }) needs the threaded build (the core waits for the GPU on shared memory): ' +
            "serve the page with `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`",
        );
      }
      const info = await client.send("init", plan(threaded, options.threads, useRelaxedSimd(options), options.wasmPath, backend));
      // Asked for by name, the fallback is worth a warning; left unset (most pages), info() has the reason.
      if (info.fallbackReason !== undefined && options.backend === "auto") {
        console.warn(`qkv: running on the wasm core, not WebGPU: ${info.fallbackReason}`);
      }
      return { backend: client as Backend, info };
    } catch (e) {
      client.fail(e instanceof Error ? e : new Error(String(e)));  // a failed load leaves no worker running
      throw e;
    }
  },
});

export * from "./index.js";
