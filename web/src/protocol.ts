// The message protocol between the browser client (browser.ts) and the Worker (worker.ts):
// `{ type, id, in }` → `{ id, out } | { id, err }`. The same calls are served directly in Node (node.ts).

import type { LanguageModelConfig, RuntimeInfo } from "./types.js";

/** Where the worker finds the build it must load (URLs computed in the main thread). */
export interface LoadPlan {
  threaded: boolean;
  threads: number;
  /** URL of the Emscripten glue (`qkv.js` / `qkv-st.js`), loaded with importScripts. */
  glueUrl: string;
  /** URL of the `.wasm` it instantiates. */
  wasmUrl: string;
  /** URL of Emscripten's pthread worker script (`qkv.worker.js`); threaded build only. */
  pthreadWorkerUrl?: string;
}

/** Each call: its input and its output. */
export interface Calls {
  init: { in: LoadPlan; out: RuntimeInfo };
  create: { in: { config: LanguageModelConfig }; out: { model: number; numParameters: number } };
  trainStep: { in: BatchIn; out: { loss: number } };
  evaluate: { in: BatchIn; out: { loss: number } };
  generate: {
    in: { model: number; prompt: Int32Array; maxTokens: number; temperature: number; seed: number };
    out: { tokens: Int32Array };
  };
  setLearningRate: { in: { model: number; lr: number }; out: null };
  dispose: { in: { model: number }; out: null };
}

export interface BatchIn {
  model: number;
  inputs: Int32Array;
  targets: Int32Array;
  batch: number;
  seq: number;
}

export type CallType = keyof Calls;

/** A request, discriminated by `type`. */
export type Request = { [K in CallType]: { type: K; id: number; in: Calls[K]["in"] } }[CallType];

/** The input of a model call (everything but `init`), discriminated by `type`. */
export type ModelRequest = Exclude<Request, { type: "init" }>;

/** An error as it crosses postMessage. */
export interface WireError {
  name: string;
  message: string;
}

export type Response = { id: number; out: Calls[CallType]["out"] } | { id: number; err: WireError };
