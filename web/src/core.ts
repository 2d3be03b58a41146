// The Embind module (the C++ core compiled to wasm) and the direct API over it: model handles by id,
// one `switch` from a request to a core call. Used in Node on the caller's thread and in the browser Worker.

import type { Calls, ModelRequest } from "./protocol.js";
import type { LanguageModelConfig, RuntimeInfo } from "./types.js";
import { VERSION } from "./version.js";

/** A `LanguageModel` object of the Embind module. */
export interface CoreLanguageModel {
  trainStep(inputs: Int32Array, targets: Int32Array, batch: number, seq: number): number;
  evaluate(inputs: Int32Array, targets: Int32Array, batch: number, seq: number): number;
  generate(prompt: Int32Array, maxTokens: number, temperature: number, seed: number): Int32Array;
  setLearningRate(lr: number): void;
  numParameters(): number;
  delete(): void;
}

/** The module `createQkvCore()` resolves to (see wasm-bindings/). */
export interface QkvCore {
  version(): string;
  simd(): string;
  threaded(): boolean;
  maxThreads(): number;
  setThreads(n: number): void;
  numThreads(): number;
  LanguageModel: new (config: LanguageModelConfig) => CoreLanguageModel;
}

/** Arguments of Emscripten's MODULARIZE factory that qkv uses. */
export interface CoreModuleArgs {
  wasmBinary?: Uint8Array;
  locateFile?: (path: string, prefix: string) => string;
  mainScriptUrlOrBlob?: string;
  /** Size of the pthread pool created at load time (threaded build). */
  qkvThreads?: number;
  print?: (text: string) => void;
  printErr?: (text: string) => void;
}

export type CoreFactory = (args: CoreModuleArgs) => Promise<QkvCore>;

/** Turns whatever the core threw into an Error (Embind rethrows qkv::Error as a JS Error already). */
export function toError(e: unknown): Error {
  if (e instanceof Error) return e;
  if (typeof e === "number") {
    return new Error(`qkv: the core threw an untranslated C++ exception (pointer ${e}); please report this`);
  }
  return new Error(String(e));
}

/** Checks the loaded core's version and thread count, returning what runs. */
export function describeCore(core: QkvCore, threads: number): RuntimeInfo {
  const version = core.version();
  if (version !== VERSION) {
    throw new Error(
      `qkv: the loaded .wasm is version ${version} but this package is ${VERSION}; ` +
        `serve the wasm/ files of the same qkv release (or point init({ wasmPath }) at them)`,
    );
  }
  const threaded = core.threaded();
  if (threaded && core.numThreads() !== threads) core.setThreads(threads);
  return { threaded, threads: core.numThreads(), simd: core.simd(), version };
}

/** Model handles over one loaded core. */
export class Engine {
  private readonly models = new Map<number, CoreLanguageModel>();
  private nextId = 1;

  constructor(readonly core: QkvCore) {}

  /** Serves one model request: the single switch of the direct API. */
  handle(req: ModelRequest): Calls[ModelRequest["type"]]["out"] {
    switch (req.type) {
      case "create": {
        const m = new this.core.LanguageModel(withoutUndefined(req.in.config));
        const model = this.nextId++;
        this.models.set(model, m);
        return { model, numParameters: m.numParameters() };
      }
      case "trainStep": {
        const { model, inputs, targets, batch, seq } = req.in;
        return { loss: this.get(model).trainStep(inputs, targets, batch, seq) };
      }
      case "evaluate": {
        const { model, inputs, targets, batch, seq } = req.in;
        return { loss: this.get(model).evaluate(inputs, targets, batch, seq) };
      }
      case "generate": {
        const { model, prompt, maxTokens, temperature, seed } = req.in;
        // A copy in an ordinary ArrayBuffer: never a view of the (shared) wasm heap.
        const tokens = Int32Array.from(this.get(model).generate(prompt, maxTokens, temperature, seed));
        return { tokens };
      }
      case "setLearningRate":
        this.get(req.in.model).setLearningRate(req.in.lr);
        return null;
      case "dispose": {
        const m = this.models.get(req.in.model);
        if (m) {
          this.models.delete(req.in.model);
          m.delete();
        }
        return null;
      }
    }
  }

  private get(model: number): CoreLanguageModel {
    const m = this.models.get(model);
    if (!m) throw new Error(`qkv: model ${model} does not exist (it was disposed)`);
    return m;
  }
}

function withoutUndefined(config: LanguageModelConfig): LanguageModelConfig {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(config)) if (v !== undefined) out[k] = v as number;
  return out as unknown as LanguageModelConfig;
}
