// Browser entry: the core runs in a (classic) Worker that loads the Emscripten glue with importScripts.
// Imports no Node module. The worker and every build file are referenced with new URL(..., import.meta.url)
// so that bundlers (Vite, webpack) emit them as assets; init({ wasmPath }) points elsewhere (a CDN).

import type { CallType, Calls, LoadPlan, Request, Response } from "./protocol.js";
import { MAX_DEFAULT_THREADS, setPlatform, type Backend } from "./platform.js";
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

/** The build files: defaults beside this module, or under `wasmPath`. */
function plan(threaded: boolean, threads: number, wasmPath: string | URL | undefined): LoadPlan {
  if (wasmPath !== undefined) {
    let base = String(wasmPath);
    if (!base.endsWith("/")) base += "/";
    const at = (f: string) => new URL(f, new URL(base, globalThis.location?.href)).href;
    return threaded
      ? { threaded, threads, glueUrl: at("qkv.js"), wasmUrl: at("qkv.wasm"), pthreadWorkerUrl: at("qkv.worker.js") }
      : { threaded, threads: 1, glueUrl: at("qkv-st.js"), wasmUrl: at("qkv-st.wasm") };
  }
  // Literal new URL(...) calls: bundlers see them and emit the files.
  return threaded
    ? {
        threaded,
        threads,
        glueUrl: new URL("./wasm/qkv.js", import.meta.url).href,
        wasmUrl: new URL("./wasm/qkv.wasm", import.meta.url).href,
        // ?no-inline: Vite would otherwise inline this small script as a data: URL, which cannot host a pthread.
        pthreadWorkerUrl: new URL("./wasm/qkv.worker.js?no-inline", import.meta.url).href,
      }
    : {
        threaded,
        threads: 1,
        glueUrl: new URL("./wasm/qkv-st.js", import.meta.url).href,
        wasmUrl: new URL("./wasm/qkv-st.wasm", import.meta.url).href,
      };
}

/** Sends requests to the worker and matches replies by id. */
class WorkerClient implements Backend {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (out: unknown) => void; reject: (e: Error) => void }>();
  private failure: Error | undefined;

  constructor(private readonly worker: Worker) {
    worker.onmessage = (e: MessageEvent<Response>) => {
      const r = e.data;
      const p = this.pending.get(r.id);
      if (!p) return;
      this.pending.delete(r.id);
      if ("err" in r) {
        // The same class as in Node (a wrong JS type is a TypeError), the name as thrown.
        const err = r.err.name === "TypeError" ? new TypeError(r.err.message) : new Error(r.err.message);
        err.name = r.err.name;
        p.reject(err);
      } else {
        p.resolve(r.out);
      }
    };
    worker.onerror = (e: ErrorEvent) => {
      e.preventDefault();
      this.fail(new Error(`qkv: the core's worker failed: ${e.message || "the worker script could not be loaded"}`));
    };
    worker.onmessageerror = () => this.fail(new Error("qkv: a message from the core's worker could not be read"));
  }

  private fail(e: Error): void {
    this.failure = e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }

  send<K extends CallType>(type: K, input: Calls[K]["in"]): Promise<Calls[K]["out"]> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (out: unknown) => void, reject });
      this.worker.postMessage({ type, id, in: input } as Request);
    });
  }

  call<K extends Exclude<CallType, "init">>(type: K, input: Calls[K]["in"]): Promise<Calls[K]["out"]> {
    return this.send(type, input);
  }
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
    const info = await client.send("init", plan(threaded, options.threads, options.wasmPath));
    return { backend: client, info };
  },
});

export * from "./index.js";
