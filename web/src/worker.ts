// The browser Worker that hosts the core (a classic worker: bundled to one plain script, no imports at run
// time). It loads the Emscripten glue with importScripts and serves requests with the direct API of core.ts.

import { Engine, crashError, describeCore, isFatal, toError, type CoreFactory } from "./core.js";
import type { LoadPlan, Request, Response } from "./protocol.js";
import type { RuntimeInfo } from "./types.js";

const scope = self as unknown as DedicatedWorkerGlobalScope & { createQkvCore?: CoreFactory };
let engine: Engine | undefined;

async function load(p: LoadPlan): Promise<RuntimeInfo> {
  const override = "point init({ wasmPath }) at the folder holding qkv.js and qkv.wasm";
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
  engine = new Engine(core);
  return describeCore(core, p.threads);
}

async function serve(req: Request): Promise<Response> {
  try {
    if (req.type === "init") return { id: req.id, out: await load(req.in) };
    if (!engine) throw new Error("qkv: the core is not loaded yet (init() first)");
    return { id: req.id, out: engine.handle(req) };
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

scope.onmessage = (e: MessageEvent<Request>) => {
  void serve(e.data).then((r) => {
    scope.postMessage(r, "out" in r ? transferables(r.out) : []);
  });
};
