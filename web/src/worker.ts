// The browser Worker that hosts the core (a classic worker: bundled to one plain script, no imports at run
// time). It loads the Emscripten glue with importScripts and serves requests with the direct API of core.ts.

import { CallOrder, Engine, crashError, describeCore, isFatal, modelOf, toError, type CoreFactory, type QkvCore } from "./core.js";
import type { TokenStream } from "./platform.js";
import type { LoadPlan, Request, Response, TokenMessage, WorkerMessage } from "./protocol.js";
import type { GpuReply, GpuRequest } from "./webgpu/protocol.js";
import type { RuntimeInfo } from "./types.js";

const scope = self as unknown as DedicatedWorkerGlobalScope & { createQkvCore?: CoreFactory };
let engine: Engine | undefined;
/** The `stream` calls under way, by request id, for their `cancel`. */
const streams = new Map<number, TokenStream>();
const order = new CallOrder();

async function load(p: LoadPlan): Promise<RuntimeInfo> {
  const override = "point init({ wasmPath }) at the folder holding the qkv build files (qkv.js, qkv.wasm, ...)";
  let wasmBinary: Uint8Array;
  try {
    const res = await fetch(p.wasmUrl);
    if (!res.ok) throw new Error(`HTTP ${res.status} ${res.statusText}`);
    wasmBinary = new Uint8Array(await res.arrayBuffer());
    // "\0asm": a server's HTML fallback page (HTTP 200) is not a module.
    const magic = [0x00, 0x61, 0x73, 0x6d];
    if (!magic.every((b, i) => wasmBinary[i] === b)) {
      throw new Error(`not a WebAssembly module: got ${res.headers.get("content-type") ?? "no content type"}`);
    }
  } catch (e) {
    throw new Error(`qkv: cannot load ${p.wasmUrl} (${toError(e).message}); ${override}`);
  }
  try {
    scope.importScripts(p.glueUrl);
  } catch (e) {
    throw new Error(`qkv: cannot load ${p.glueUrl} (${toError(e).message}); ${override}`);
  }
  const factory = scope.createQkvCore;
  if (typeof factory !== "function") throw new Error(`qkv: ${p.glueUrl} did not define createQkvCore; ${override}`);
  const core = await factory({
    wasmBinary,
    // Emscripten asks for its files by name; the bundler may have renamed them.
    locateFile: (file) => (file.endsWith(".worker.js") ? p.pthreadWorkerUrl ?? file : file.endsWith(".wasm") ? p.wasmUrl : file),
    // pthread workers load the glue from here (inside a worker Emscripten would pick this worker's own URL).
    mainScriptUrlOrBlob: p.glueUrl,
    qkvThreads: p.threads,
  });
  const e = (engine = new Engine(core));
  e.runtime = describeCore(core, p.threads, p.relaxedSimd, await connectGpu(core, p, (why) => (e.gpuGone = why)));
  return e.runtime;
}

/** Ring size of the WebGPU command stream: 4 MiB, room for thousands of ops between two waits. */
const RING_WORDS = 1 << 20;
let gpuWorker: Worker | undefined;

/**
 * Starts the GPU worker and connects the core to it (gpu-worker.ts), as init({ backend }) asks: "webgpu"
 * rejects with the reason when that fails, "auto" falls back to the wasm core and says why.
 */
async function connectGpu(
  core: QkvCore,
  p: LoadPlan,
  gone: (why: string) => void,
): Promise<Pick<RuntimeInfo, "backend" | "adapter" | "fallbackReason">> {
  if (p.backend === "wasm") return { backend: "wasm" };
  const refuse = (reason: string) => {
    gpuWorker?.terminate();
    gpuWorker = undefined;
    if (p.backend === "webgpu") throw new Error(`qkv: init({ backend: "webgpu" }) failed: ${reason}`);
    return { backend: "wasm" as const, fallbackReason: reason };
  };
  if (!p.threaded || !core.wasmMemory) return refuse("WebGPU needs the threaded build (a cross-origin isolated page)");
  if (!p.gpuWorkerUrl || typeof Worker === "undefined") return refuse("this environment cannot start the GPU worker");
  const worker = (gpuWorker = new Worker(p.gpuWorkerUrl));
  const reply = (timeoutMs: number) =>
    new Promise<GpuReply>((resolve) => {
      const timer = setTimeout(() => resolve({ type: "unavailable", reason: `the GPU worker did not answer within ${timeoutMs / 1000} s` }), timeoutMs);
      worker.onmessage = (e: MessageEvent<GpuReply>) => {
        clearTimeout(timer);
        resolve(e.data);
      };
      worker.onerror = (e) => {
        clearTimeout(timer);
        resolve({ type: "unavailable", reason: `the GPU worker failed to start (${e.message || p.gpuWorkerUrl})` });
      };
    });
  let answer = reply(30_000);
  worker.postMessage({ type: "open" } satisfies GpuRequest);
  const opened = await answer;
  if (opened.type !== "opened") return refuse(opened.type === "unavailable" ? opened.reason : "unexpected reply");
  if (p.backend === "auto" && opened.fallback) {
    return refuse(`the only WebGPU adapter is a software one (${opened.adapter}); the wasm core is faster`);
  }
  const control = core.webgpuConnect(opened.maxBufferSize, opened.maxStorageBufferBindingSize, opened.adapter, RING_WORDS);
  if (!control) return refuse(core.takeError()?.message ?? "webgpuConnect failed");
  answer = reply(30_000);
  worker.postMessage({ type: "start", memory: core.wasmMemory, control } satisfies GpuRequest);
  const started = await answer;
  if (started.type !== "started") {
    core.webgpuFail("the GPU worker did not start");
    return refuse(started.type === "unavailable" ? started.reason : "unexpected reply");
  }
  // From now on the worker speaks only to report a device loss (the ring's control block has it too).
  const fail = (why: string) => {
    core.webgpuFail(why);
    gone(why);
  };
  worker.onmessage = (e: MessageEvent<GpuReply>) => {
    if (e.data.type === "lost") fail(`the GPU device was lost: ${e.data.reason}`);
  };
  worker.onerror = (e) => fail(`the GPU worker stopped: ${e.message}`);
  return { backend: "webgpu", adapter: opened.adapter };
}

/** For tests: destroys the GPU worker's device, as a driver reset would. */
function loseGpuDevice(): void {
  gpuWorker?.postMessage({ type: "lose" } satisfies GpuRequest);
}

async function serve(req: Request): Promise<Response> {
  try {
    if (req.type === "init") return { id: req.id, out: await load(req.in) };
    if (req.type === "loseGpuDevice") {
      if (!gpuWorker) throw new Error("qkv: no GPU worker is running (init({ backend: \"webgpu\" }) first)");
      loseGpuDevice();
      return { id: req.id, out: null };
    }
    const e = engine;
    if (!e) throw new Error("qkv: the core is not loaded yet (init() first)");
    if (req.type === "stream") {
      // Each token goes out as soon as it is made; between two tokens this worker serves other messages.
      const post = (token: number) => scope.postMessage({ id: req.id, token } satisfies TokenMessage);
      const s = order.stream(req.in.model, () => e.stream(req.in, post));
      streams.set(req.id, s);
      try {
        return { id: req.id, out: { tokens: await s.result } };
      } finally {
        streams.delete(req.id);
      }
    }
    // dispose() at once, even while its model streams: that ends the stream.
    if (req.type === "dispose") return { id: req.id, out: e.handle(req) };
    return { id: req.id, out: await order.call(modelOf(req.in), () => e.handle(req)) };
  } catch (e) {
    if (isFatal(e)) {
      // The wasm memory can no longer be trusted: serve nothing more (the client terminates this worker).
      engine = undefined;
      return { id: req.id, err: { name: "Error", message: crashError(e).message, fatal: true } };
    }
    const err = toError(e);
    return { id: req.id, err: { name: err.name, message: err.message } };
  }
}

/** The buffers of the typed arrays in a reply: fresh copies out of the core, moved rather than copied. */
function transferables(out: unknown): ArrayBuffer[] {
  if (typeof out !== "object" || out === null) return [];
  const buffers: ArrayBuffer[] = [];
  for (const v of Object.values(out)) {
    if (ArrayBuffer.isView(v) && v.buffer instanceof ArrayBuffer && !buffers.includes(v.buffer)) buffers.push(v.buffer);
  }
  return buffers;
}

scope.onmessage = (e: MessageEvent<WorkerMessage>) => {
  const m = e.data;
  if (m.type === "cancel") {
    streams.get(m.id)?.stop(); // a stream that already ended has replied: nothing to do
    return;
  }
  void serve(m).then((r) => {
    scope.postMessage(r, "out" in r ? transferables(r.out) : []);
  });
};
