// The public API of qkv, the same in Node and in the browser. The entries (node.ts, browser.ts) plug in how
// the core is loaded and where it runs; everything here is promise-based and checks its arguments.

import { getPlatform, type Backend } from "./platform.js";
import type {
  BatchShape,
  GenerateOptions,
  InitOptions,
  LanguageModelConfig,
  RuntimeInfo,
  StepResult,
} from "./types.js";
import { checkBatch, checkConfig, checkGenerate, describe, positiveFinite, positiveInt } from "./validate.js";

export type { BatchShape, GenerateOptions, InitOptions, LanguageModelConfig, RuntimeInfo, StepResult } from "./types.js";
export { CharTokenizer } from "./tokenizer.js";
export { VERSION } from "./version.js";

let loading: Promise<{ backend: Backend; info: RuntimeInfo }> | undefined;

/**
 * Loads the core: the threaded build where the environment allows it (always in Node; in a browser when
 * the page is cross-origin isolated), the single-threaded build otherwise (with one console warning naming
 * the headers to set). Calling it again returns the first call's result; after a failed load it retries.
 * {@link LanguageModel.create} calls it with defaults when you have not.
 */
export async function init(options: InitOptions = {}): Promise<RuntimeInfo> {
  return (await load(options)).info;
}

function load(options: InitOptions): Promise<{ backend: Backend; info: RuntimeInfo }> {
  if (!loading) {
    loading = (async () => {
      if (typeof options !== "object" || options === null) {
        throw new Error(`options must be an object { threads?, wasmPath?, threaded? }, got ${describe(options)}`);
      }
      const platform = getPlatform();
      const threads = options.threads === undefined ? platform.defaultThreads() : positiveInt("threads", options.threads);
      if (options.threaded !== undefined && typeof options.threaded !== "boolean") {
        throw new Error(`threaded must be a boolean, got ${describe(options.threaded)}`);
      }
      return platform.load({ ...options, threads });
    })();
    loading.catch(() => {
      loading = undefined;
    });
  }
  return loading;
}

const leaks: FinalizationRegistry<number> | undefined =
  typeof FinalizationRegistry === "function"
    ? new FinalizationRegistry((id) => {
        console.warn(
          `qkv: LanguageModel #${id} was garbage-collected without dispose(); its wasm memory stays allocated. ` +
            "Call model.dispose() (or use `using model = ...`) when done with a model.",
        );
      })
    : undefined;

/**
 * A decoder-only (GPT-style) Transformer language model living in the wasm core.
 * Create it with {@link LanguageModel.create}; free it with {@link LanguageModel.dispose}.
 * Every method rejects with an `Error` naming the bad argument; the model stays usable afterwards.
 */
export class LanguageModel {
  /** The configuration it was created with (optional fields as given; the core fills the defaults). */
  readonly config: Readonly<LanguageModelConfig>;
  readonly #backend: Backend;
  readonly #id: number;
  readonly #numParameters: number;
  #disposed = false;

  private constructor(backend: Backend, id: number, config: LanguageModelConfig, numParameters: number) {
    this.#backend = backend;
    this.#id = id;
    this.config = Object.freeze({ ...config });
    this.#numParameters = numParameters;
    leaks?.register(this, id, this);
  }

  /** Builds a model with freshly initialised weights (loads the core first if {@link init} was not called). */
  static async create(config: LanguageModelConfig): Promise<LanguageModel> {
    const checked = checkConfig(config);
    const { backend } = await load({});
    const { model, numParameters } = await backend.call("create", { config: checked });
    return new LanguageModel(backend, model, checked, numParameters);
  }

  /** Whether {@link dispose} was called. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Number of trainable parameters (floats). */
  numParameters(): number {
    this.#alive("numParameters");
    return this.#numParameters;
  }

  /**
   * One optimisation step: forward, backward and an AdamW update on a batch laid out as `(batch, seq)`.
   * `targets[i]` is the token that should follow `inputs[i]`. Resolves to the loss before the update.
   */
  async trainStep(inputs: Int32Array, targets: Int32Array, shape?: BatchShape): Promise<StepResult> {
    this.#alive("trainStep");
    return this.#backend.call("trainStep", { model: this.#id, ...checkBatch(inputs, targets, shape) });
  }

  /** The loss on a batch, without updating the weights. */
  async evaluate(inputs: Int32Array, targets: Int32Array, shape?: BatchShape): Promise<StepResult> {
    this.#alive("evaluate");
    return this.#backend.call("evaluate", { model: this.#id, ...checkBatch(inputs, targets, shape) });
  }

  /** Samples `maxTokens` new tokens after `prompt` (temperature sampling); resolves to the new tokens only. */
  async generate(prompt: Int32Array, options: GenerateOptions): Promise<Int32Array> {
    this.#alive("generate");
    const { tokens } = await this.#backend.call("generate", { model: this.#id, ...checkGenerate(prompt, options) });
    return tokens;
  }

  /** Sets the AdamW learning rate of the following steps (for a schedule: warm-up, cosine decay). */
  async setLearningRate(lr: number): Promise<void> {
    this.#alive("setLearningRate");
    await this.#backend.call("setLearningRate", { model: this.#id, lr: positiveFinite("lr", lr) });
  }

  /** Frees the model's wasm memory. Later calls reject; calling it twice is harmless. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    leaks?.unregister(this);
    this.#backend.call("dispose", { model: this.#id }).catch((e: unknown) => {
      console.warn("qkv: dispose failed:", e);
    });
  }

  /** Same as {@link dispose}, for `using model = await LanguageModel.create(...)`. */
  declare [Symbol.dispose]: () => void;

  #alive(method: string): void {
    if (this.#disposed) throw new Error(`qkv: LanguageModel.${method}() was called after dispose(); create a new model`);
  }
}

// Symbol.dispose may be missing (older engines): add the method only where the symbol exists.
if (typeof Symbol.dispose === "symbol") {
  Object.defineProperty(LanguageModel.prototype, Symbol.dispose, {
    value: function (this: LanguageModel) {
      this.dispose();
    },
    writable: true,
    configurable: true,
  });
}
