// Loading the core once per page or process, and what every model shares: the backend that serves its
// calls and the registry that warns about models garbage-collected without dispose().

import { getPlatform, hasRelaxedSimd, type Backend } from "./platform.js";
import type { BackendCheck, InitOptions, MemoryReport, RuntimeInfo } from "./types.js";
import { describe, positiveInt } from "./validate.js";

let loading: Promise<{ backend: Backend; info: RuntimeInfo }> | undefined;

/**
 * Loads the core: the threaded build where the environment allows it (always in Node; in a browser when
 * the page is cross-origin isolated), the single-threaded build otherwise (with one console warning naming
 * the headers to set). Calling it again returns the first call's result; after a failed load it retries.
 * Every `create`, `load` and tokenizer factory calls it with defaults when you have not. After the core
 * crashed (a WebAssembly trap, or the browser Worker died), its models reject every call with an Error
 * saying so, and the next `init()` starts a new core.
 */
export async function init(options: InitOptions = {}): Promise<RuntimeInfo> {
  return (await load(options)).info;
}

/** The loaded backend (loading it with `options` first if needed; again if the loaded one crashed). */
export async function load(options: InitOptions = {}): Promise<{ backend: Backend; info: RuntimeInfo }> {
  if (loading) {
    const current = loading;
    const loaded = await current.catch(() => undefined);
    if (loaded?.backend.failed() && loading === current) loading = undefined;
  }
  if (!loading) {
    loading = (async () => {
      if (typeof options !== "object" || options === null) {
        throw new Error(`options must be an object { threads?, wasmPath?, threaded?, relaxedSimd?, backend? }, got ${describe(options)}`);
      }
      const platform = getPlatform();
      const threads = options.threads === undefined ? platform.defaultThreads() : positiveInt("threads", options.threads);
      if (options.threaded !== undefined && typeof options.threaded !== "boolean") {
        throw new Error(`threaded must be a boolean, got ${describe(options.threaded)}`);
      }
      if (options.relaxedSimd !== undefined && typeof options.relaxedSimd !== "boolean") {
        throw new Error(`relaxedSimd must be a boolean, got ${describe(options.relaxedSimd)}`);
      }
      if (options.backend !== undefined && !["webgpu", "wasm", "auto"].includes(options.backend)) {
        throw new Error(`backend must be "webgpu", "wasm" or "auto", got ${describe(options.backend)}`);
      }
      if (options.relaxedSimd === true && !hasRelaxedSimd()) {
        throw new Error(
          "qkv: init({ relaxedSimd: true }) needs a WebAssembly engine with relaxed SIMD (Chromium 114+ and " +
            "Node 22+, for instance; Node 20 with --experimental-wasm-relaxed-simd); leave relaxedSimd unset " +
            "to use it where it is available",
        );
      }
      return platform.load({ ...options, threads });
    })();
    loading.catch(() => {
      loading = undefined;
    });
  }
  return loading;
}

/**
 * What runs now: `init()`'s answer, with `backend` as of this moment (after a GPU device loss, `"wasm"` with
 * the reason in `fallbackReason`). Loads the core with defaults if needed.
 */
export async function info(): Promise<RuntimeInfo> {
  return (await backend()).call("info", null);
}

/**
 * Runs every op of the executor models run on (WebGPU, or the wasm core) and a trusted one (the wasm core's
 * CPU kernels, or plain loops) on the same random inputs over ragged shapes, and reports how far apart each
 * output is: a check of this machine's GPU driver and of qkv's kernels on it. `group` runs one family
 * ("gemm", "attention", ...; default all). Takes seconds on a GPU, longer on a software adapter.
 */
export async function checkBackend(options: { group?: string } = {}): Promise<BackendCheck> {
  const group = options.group ?? "";
  if (typeof group !== "string") throw new TypeError(`options.group must be a string, got ${describe(group)}`);
  return (await backend()).call("checkBackend", { group });
}

/** The backend, loading the core with defaults if {@link init} was not called. */
export async function backend(): Promise<Backend> {
  return (await load()).backend;
}

/**
 * What the core holds: every live (not disposed) model with its bytes by purpose, and the size of the wasm
 * heap. Loads the core if needed. Use it to find a forgotten `dispose()`: the heap never shrinks, but a
 * loop that disposes what it creates keeps it flat.
 */
export async function memory(): Promise<MemoryReport> {
  return (await backend()).call("memory", null);
}
