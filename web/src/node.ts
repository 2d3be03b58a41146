// Node entry: the core runs on the caller's thread (its pthreads on worker_threads); the .wasm is read from disk.

import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CallOrder, Engine, crashError, describeCore, isFatal, modelOf, toError, type CoreFactory } from "./core.js";
import { MAX_DEFAULT_THREADS, setPlatform, useRelaxedSimd, type Backend } from "./platform.js";

const require = createRequire(import.meta.url);

function wasmDir(wasmPath: string | URL | undefined): string {
  if (wasmPath === undefined) return fileURLToPath(new URL("./wasm/", import.meta.url));
  if (wasmPath instanceof URL || wasmPath.startsWith("file:")) return fileURLToPath(wasmPath);
  if (typeof wasmPath !== "string") throw new Error(`wasmPath must be a folder path or file: URL, got ${typeof wasmPath}`);
  return path.resolve(wasmPath);
}

/**
 * Lets Node exit while the core is loaded: the pthread pool's worker_threads would otherwise keep the
 * process alive forever. They only work while a call from this thread runs, so nothing is cut short.
 */
function allowExit(core: object): void {
  type NodeWorker = { unref?: () => void };
  const pthread = (core as { PThread?: { unusedWorkers?: NodeWorker[]; runningWorkers?: NodeWorker[] } }).PThread;
  for (const w of [...(pthread?.unusedWorkers ?? []), ...(pthread?.runningWorkers ?? [])]) w.unref?.();
}

setPlatform({
  defaultThreads() {
    const n = typeof os.availableParallelism === "function" ? os.availableParallelism() : os.cpus().length;
    return Math.max(1, Math.min(MAX_DEFAULT_THREADS, n));
  },

  async load(options) {
    const threaded = options.threaded ?? true;
    const dir = wasmDir(options.wasmPath);
    const relaxedSimd = useRelaxedSimd(options);
    const stem = threaded ? "qkv" : "qkv-st";
    // One glue for both builds of a kind: they differ only in the kernels inside the .wasm.
    const gluePath = path.join(dir, `${stem}.js`);
    const wasmPath = path.join(dir, `${stem}${relaxedSimd ? "-relaxed" : ""}.wasm`);
    const howToFix = 'run "npm run build:web", or point init({ wasmPath }) at the folder holding the qkv build';
    let factory: CoreFactory;
    let wasmBinary: Uint8Array;
    try {
      wasmBinary = await readFile(wasmPath);
    } catch (e) {
      throw new Error(`qkv: cannot read ${wasmPath} (${toError(e).message}); ${howToFix}`);
    }
    try {
      factory = require(gluePath) as CoreFactory;
    } catch (e) {
      throw new Error(`qkv: cannot load ${gluePath} (${toError(e).message}); ${howToFix}`);
    }
    if (options.backend === "webgpu") {
      throw new Error('qkv: init({ backend: "webgpu" }) needs a browser with WebGPU; Node runs the wasm core (backend "wasm" or "auto")');
    }
    const threads = threaded ? options.threads : 1;
    const core = await factory({ wasmBinary, qkvThreads: threads });
    // "auto" in Node: there is no navigator.gpu here, so the wasm core, quietly (it is what Node always runs).
    const info = describeCore(core, threads, relaxedSimd, { backend: "wasm" });
    allowExit(core);
    const engine = new Engine(core);
    engine.runtime = info;
    const order = new CallOrder();
    let failure: Error | undefined;
    // A trap or abort: this core is done; init() starts a new one (runtime.ts).
    const fail = (e: unknown): Error => (isFatal(e) ? (failure = crashError(e)) : toError(e));
    const backend: Backend = {
      failed: () => failure,
      async call(type, input) {
        if (failure) throw failure;
        // The request union is keyed by type; the cast pairs them up again.
        const handle = () => engine.handle({ type, id: 0, in: input } as Parameters<Engine["handle"]>[0]) as never;
        try {
          // dispose() at once, even while its model streams: that ends the stream.
          return type === "dispose" ? handle() : await order.call(modelOf(input), handle);
        } catch (e) {
          throw fail(e);
        }
      },
      stream(input, onToken) {
        if (failure) return { result: Promise.reject(failure), stop() {} };
        try {
          const s = order.stream(input.model, () => engine.stream(input, onToken));
          return {
            result: s.result.catch((e: unknown) => {
              throw fail(e);
            }),
            stop: s.stop,
          };
        } catch (e) {
          return { result: Promise.reject(fail(e)), stop() {} };
        }
      },
    };
    return { backend, info };
  },
});

export * from "./index.js";
