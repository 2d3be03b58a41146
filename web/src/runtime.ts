// Loading the core once per page or process, and what every model shares: the backend that serves its
// calls and the registry that warns about models garbage-collected without dispose().

import { getPlatform, hasRelaxedSimd, type Backend } from "./platform.js";
import type { BackendCheck, InitOptions, MemoryReport, RuntimeInfo } from "./types.js";
import { describe, positiveInt } from "./validate.js";

let loading: Promise<{ backend: Backend; info: RuntimeInfo }> | undefined;
/** The options of the call that started the running core (`{}` when a model factory started it). */
let startedWith: InitOptions = {};

/**
 * Loads the core: the threaded build where the environment allows it (always in Node; in a browser when
 * the page is cross-origin isolated), the single-threaded build otherwise (with one console warning naming
 * the headers to set). The core starts once per page or process: calling `init()` again with no options, or
 * with options the running core already has, resolves to the running core's info; with an option it does not
 * have (another `threads`, `backend`, `threaded`, `relaxedSimd` or `wasmPath`), it rejects naming each one,
 * since the running core and its models cannot change them. After a failed load it retries.
 * Every `create`, `load` and tokenizer factory calls it with defaults when you have not, so call `init` with
 * your options before the first of them. After the core crashed (a WebAssembly trap, or the browser Worker
 * died), its models reject every call with an Error saying so, and the next `init()` starts a new core.
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
    startedWith = typeof options === "object" && options !== null ? { ...options } : {};  // as given, not as later changed
    loading = (async () => {
      checkOptions(options);
      const platform = getPlatform();
      const threads = options.threads === undefined ? platform.defaultThreads() : positiveInt("threads", options.threads);
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
    return loading;
  }
  checkOptions(options);
  if (options.threads !== undefined) positiveInt("threads", options.threads);
  const running = loading;
  const loaded = await running;
  const differ = differences(options, startedWith, loaded.info);
  if (differ.length > 0) {
    throw new Error(
      `qkv: init() asked for ${differ.join(", ")}, but the core already runs ` +
        `(started by ${Object.keys(startedWith).length > 0 ? `init(${show(startedWith)})` : "init() or a model's create/load with the defaults"}), ` +
        "and a running core keeps its options. To get these, call init() with them before creating or loading " +
        "any model (and before any tokenizer factory), or dispose() every model and start over (reload the page, " +
        "or restart the process in Node)",
    );
  }
  return loaded;
}

/** The type checks of init's options (before they are used to start a core or compared with the running one). */
function checkOptions(options: InitOptions): void {
  if (typeof options !== "object" || options === null) {
    throw new Error(`options must be an object { threads?, wasmPath?, threaded?, relaxedSimd?, backend? }, got ${describe(options)}`);
  }
  if (options.threaded !== undefined && typeof options.threaded !== "boolean") {
    throw new Error(`threaded must be a boolean, got ${describe(options.threaded)}`);
  }
  if (options.relaxedSimd !== undefined && typeof options.relaxedSimd !== "boolean") {
    throw new Error(`relaxedSimd must be a boolean, got ${describe(options.relaxedSimd)}`);
  }
  if (options.backend !== undefined && !["webgpu", "wasm", "auto"].includes(options.backend)) {
    throw new Error(`backend must be "webgpu", "wasm" or "auto", got ${describe(options.backend)}`);
  }
}

/**
 * Each option given to a later init() that the running core (started with `first`, answering `info`) does
 * not have, as "name VALUE (running: VALUE)". An option left unset asks for nothing. `threads` is ignored by
 * the single-threaded build (as when it starts); `backend: "auto"` (or unset) is what a core started with
 * "auto" or unset has, whichever it picked, and what a core on WebGPU has.
 */
function differences(asked: InitOptions, first: InitOptions, info: RuntimeInfo): string[] {
  const out: string[] = [];
  const differs = (name: string, want: unknown, have: unknown) => out.push(`${name} ${literal(want)} (running: ${literal(have)})`);
  if (asked.threads !== undefined && info.threaded && asked.threads !== info.threads) differs("threads", asked.threads, info.threads);
  if (asked.threaded !== undefined && asked.threaded !== info.threaded) differs("threaded", asked.threaded, info.threaded);
  if (asked.relaxedSimd !== undefined && asked.relaxedSimd !== info.relaxedSimd) differs("relaxedSimd", asked.relaxedSimd, info.relaxedSimd);
  if (asked.backend !== undefined) {
    const firstAuto = first.backend === undefined || first.backend === "auto";
    const same = asked.backend === "auto" ? firstAuto || info.backend === "webgpu" : asked.backend === info.backend;
    if (!same) differs("backend", asked.backend, info.backend);
  }
  if (asked.wasmPath !== undefined && String(asked.wasmPath) !== String(first.wasmPath)) {
    out.push(`wasmPath ${literal(String(asked.wasmPath))} (running: ${first.wasmPath === undefined ? "the default wasm/ folder" : literal(String(first.wasmPath))})`);
  }
  return out;
}

/** A value as it is written in code: `2`, `true`, `"wasm"`. */
function literal(v: unknown): string {
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

/** `{ threads: 2, backend: "wasm" }`, as a caller wrote it. */
function show(options: InitOptions): string {
  const parts = Object.entries(options)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}: ${literal(v instanceof URL ? v.href : v)}`);
  return parts.length > 0 ? `{ ${parts.join(", ")} }` : "";
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
