// What every model class shares: a handle on a model living in the core, disposal, checkpoints, the
// learning rate and memory. LanguageModel, Seq2Seq and Classifier add their own training and inference.

// The published model.d.ts names Symbol.dispose: this keeps it type-checking in a consumer whose lib is older
// than ESNext (create-vite's ES2022, DOM) without skipLibCheck. Type declarations only; no runtime effect.
/// <reference lib="esnext.disposable" preserve="true" />

import type { Backend, ModelCallType, TokenStream } from "./platform.js";
import type { Calls, ModelOut } from "./protocol.js";
import { backend } from "./runtime.js";
import { tokenizerJSON, type Tokenizer } from "./tokenizer.js";
import { loadStream, streamIn } from "./load-stream.js";
import type { WeightsStream } from "./pretrained.js";
import type { CheckpointSource, LoadOptions, MemoryUsage, ModelKind, PretrainedOptions, QuantizeOptions, WeightFormat } from "./types.js";
import { boolean, bytes, describe, object, positiveFinite, string, stringRecord } from "./validate.js";

/** Options for `save()`. */
export interface SaveOptions {
  /**
   * Include the Adam moments and step count, so that training resumes exactly (default true).
   * Without them the file holds the weights and config only (about a third of the size).
   */
  optimizer?: boolean;
  /**
   * A tokenizer of this package (`CharTokenizer.fromText`, `Tokenizer.fromJSON`, ...) to store beside the
   * weights, as its JSON under the metadata key `qkv.tokenizer`: where `qkv train` puts it, so that
   * `qkv generate --ckpt file` runs the file and {@link Tokenizer.fromCheckpoint} reads it back.
   */
  tokenizer?: Tokenizer;
  /**
   * Extra string entries for the file's safetensors `__metadata__` (what `checkpointMetadata()`
   * lists; loading ignores them), e.g. `{ "qkv.tokenizer.target": JSON.stringify(targetTokenizer) }` for a
   * seq2seq model that `qkv generate` should run. The keys the checkpoint writes itself (`qkv.model`,
   * `qkv.config`, `qkv.optimizer`, `qkv.step`, `qkv.skipped_steps`, `qkv.passes`, `qkv.optimizer_state`,
   * `qkv.version`, `qkv.crc32`, `format`) are refused, as is `qkv.tokenizer` together with
   * {@link SaveOptions.tokenizer}.
   */
  metadata?: Record<string, string>;
}

/** A model in the core: which backend serves it, its id there, and whether it was disposed. */
interface Handle {
  readonly backend: Backend;
  readonly id: number;
  readonly kind: ModelKind;
  disposed: boolean;
}

const leaks: FinalizationRegistry<{ kind: ModelKind; id: number }> | undefined =
  typeof FinalizationRegistry === "function"
    ? new FinalizationRegistry(({ kind, id }) => {
        console.warn(
          `qkv: ${kind} #${id} was garbage-collected without dispose(); its wasm memory stays allocated. ` +
            "Call model.dispose() (or use `using model = ...`) when done with a model.",
        );
      })
    : undefined;

/** The calls a model class makes for itself (not part of the public API: index.ts does not export it). */
export let callModel: <K extends ModelCallType>(
  m: Model<object>,
  method: string,
  type: K,
  input: Omit<Calls[K]["in"], "model">,
) => Promise<Calls[K]["out"]>;

/** A model's token-by-token generation (Backend.stream); not part of the public API either. */
export let streamModel: (
  m: Model<object>,
  method: string,
  input: Omit<Calls["stream"]["in"], "model">,
  onToken: (token: number) => void,
) => TokenStream;

/**
 * A model living in the wasm core: the base of {@link LanguageModel}, {@link Seq2Seq} and {@link Classifier}.
 * Free it with {@link Model.dispose} (or `using`). Every method rejects with an `Error` naming the bad
 * argument when a call fails; the model stays usable afterwards.
 */
export abstract class Model<C extends object> {
  /** The whole configuration, every default filled in (optimizer fields included). */
  readonly config: Readonly<Required<C>>;
  readonly #handle: Handle;
  readonly #numParameters: number;

  static {
    callModel = (m, method, type, input) => {
      const h = m.#alive(method);
      return h.backend.call(type, { ...input, model: h.id } as Calls[typeof type]["in"]);
    };
    streamModel = (m, method, input, onToken) => {
      const h = m.#alive(method);
      return h.backend.stream({ ...input, model: h.id }, onToken);
    };
  }

  /** @internal Use the static `create` or `load` of a model class. */
  protected constructor(kind: ModelKind, backend: Backend, out: ModelOut) {
    this.#handle = { backend, id: out.model, kind, disposed: false };
    this.config = Object.freeze({ ...out.config }) as unknown as Readonly<Required<C>>;
    this.#numParameters = out.numParameters;
    leaks?.register(this, { kind, id: out.model }, this);
  }

  /** Whether {@link dispose} was called. */
  get disposed(): boolean {
    return this.#handle.disposed;
  }

  /** Number of trainable parameters (floats). */
  numParameters(): number {
    this.#alive("numParameters");
    return this.#numParameters;
  }

  /**
   * The model as a safetensors checkpoint: weights under their PyTorch-style names, the config in the
   * metadata and (by default) the optimizer state, so that `load` continues training exactly. The same
   * bytes load in the native build (`qkv::LanguageModel::load_file` and the `qkv` tool) and in PyTorch.
   * `tokenizer` stores a tokenizer under the metadata key `qkv.tokenizer` (as `qkv train` does, so
   * `qkv generate` runs the file and `Tokenizer.fromCheckpoint` reads it back); `metadata` adds string
   * keys of your own. A key the checkpoint writes itself (`qkv.config`, `qkv.crc32`, ...) rejects with an
   * `Error` naming it.
   */
  async save(options: SaveOptions = {}): Promise<Uint8Array> {
    const o = object("options", options, "{ optimizer?, tokenizer?, metadata? }");
    const optimizer = o.optimizer === undefined ? true : boolean("options.optimizer", o.optimizer);
    const metadata = o.metadata === undefined ? {} : stringRecord("options.metadata", o.metadata);
    if (o.tokenizer !== undefined) {
      const json = tokenizerJSON(o.tokenizer);
      if (json === undefined) {
        throw new TypeError(
          "options.tokenizer must be a tokenizer of this package (CharTokenizer.fromText, ByteTokenizer.create, " +
            `WordTokenizer.fromText, Tokenizer.fromJSON, ...), got ${describe(o.tokenizer)}`,
        );
      }
      if (Object.hasOwn(metadata, "qkv.tokenizer")) {
        throw new Error('options.metadata["qkv.tokenizer"] and options.tokenizer both give the key "qkv.tokenizer": pass one');
      }
      metadata["qkv.tokenizer"] = json;
    }
    return (await callModel(this, "save", "save", { optimizer, metadata })).bytes;
  }

  /**
   * Replaces the weights from any safetensors file: a qkv checkpoint of the same configuration, or a PyTorch
   * state dict exactly as `safetensors.torch.save_file(model.state_dict(), ...)` wrote it, in qkv's names or
   * in those of `nn.Transformer`, the translation tutorial's `Seq2SeqTransformer`, nanoGPT's GPT or the
   * seeds' tutorials (README, "Importing PyTorch models"), mapped onto this model's parameters as it loads.
   * A file that does not fit rejects naming every missing, left-over and mis-shaped tensor; a `.pt` pickle
   * rejects with the line that converts it. Nothing changes on error; the optimizer state is kept.
   */
  async loadWeights(data: Uint8Array | ArrayBuffer): Promise<void> {
    await callModel(this, "loadWeights", "loadWeights", { bytes: bytes("bytes", data) });
  }

  /** Sets the learning rate of the following steps (for a schedule of your own: warm-up, decay). */
  async setLearningRate(lr: number): Promise<void> {
    await callModel(this, "setLearningRate", "setLearningRate", { lr: positiveFinite("lr", lr) });
  }

  /**
   * Stores every Linear weight (and, per `options.embedding`, the token embedding) in `options.weights`' format,
   * freeing their float32 values: `memory().parameters` falls about 4x (int8), 7x (q4) or 2x (f16, bf16). The
   * model then generates, predicts, evaluates and saves (its checkpoints load quantized) but no longer trains:
   * `trainStep` rejects (fine-tuning a quantized base is for LoRA adapters). Rejects, changing nothing, for an
   * unknown format or a model already quantized. Resolves to the packed tensors' formats by name.
   */
  async quantize(options: QuantizeOptions): Promise<Record<string, WeightFormat>> {
    // Only the JS types are checked here; the format's name is the core's to judge (its error names the choices).
    const o = object("options", options, '{ weights: "int8" }');
    const weights = string("options.weights", o["weights"]) as WeightFormat;
    const out = await callModel(this, "quantize", "quantize", {
      options: o["embedding"] === undefined ? { weights } : { weights, embedding: boolean("options.embedding", o["embedding"]) },
    });
    return out.formats;
  }

  /** Bytes this model holds in the wasm heap: weights, gradients, Adam moments and activations. */
  async memory(): Promise<MemoryUsage> {
    const h = this.#alive("memory");
    const report = await h.backend.call("memory", null);
    const mine = report.models.find((m) => m.id === h.id);
    if (!mine) throw new Error(`qkv: ${h.kind}.memory() was called after dispose(); create a new model`);
    return mine.bytes;
  }

  /** Frees the model's wasm memory. Later calls reject; calling it twice is harmless. */
  dispose(): void {
    const h = this.#handle;
    if (h.disposed) return;
    h.disposed = true;
    leaks?.unregister(this);
    h.backend.call("dispose", { model: h.id }).catch((e: unknown) => {
      console.warn("qkv: dispose failed:", e);
    });
  }

  /** Same as {@link dispose}, for `using model = await LanguageModel.create(...)`. */
  declare [Symbol.dispose]: () => void;

  #alive(method: string): Handle {
    const h = this.#handle;
    if (h.disposed) throw new Error(`qkv: ${h.kind}.${method}() was called after dispose(); create a new model`);
    return h;
  }
}

// Symbol.dispose may be missing (older engines): add the method only where the symbol exists.
if (typeof Symbol.dispose === "symbol") {
  Object.defineProperty(Model.prototype, Symbol.dispose, {
    value: function (this: Model<object>) {
      this.dispose();
    },
    writable: true,
    configurable: true,
  });
}

/** Creates a model of `kind` in the core (loading the core first if needed). */
export async function createIn(kind: ModelKind, config: Readonly<Record<string, unknown>>): Promise<[Backend, ModelOut]> {
  const b = await backend();
  return [b, await b.call("create", { kind, config })];
}

/** A Hugging Face GPT-2 (config.json, model.safetensors) into the core as a LanguageModel. */
export async function importIn(config: unknown, weights: unknown): Promise<[Backend, ModelOut]> {
  if (typeof config !== "string" && (typeof config !== "object" || config === null || Array.isArray(config)))
    throw new TypeError(`config must be config.json's text or its parsed object, got ${describe(config)}`);
  const text = typeof config === "string" ? config : JSON.stringify(config);
  const w = bytes("weights", weights);
  const be = await backend();
  return [be, await be.call("importPretrained", { config: text, weights: w })];
}

/**
 * A Hugging Face GPT-2 streamed into the core as a LanguageModel: config.json's text, then model.safetensors piece by
 * piece as it arrives (load-stream.ts streamIn; the core's PretrainedLoader writes each tensor into its parameter), so
 * the file is never held whole. Progress as the bytes arrive; on any failure or abort the download stops and nothing
 * stays in the core.
 */
export async function pretrainedIn(
  config: string,
  weights: WeightsStream,
  options: PretrainedOptions,
): Promise<[Backend, ModelOut]> {
  const { onProgress, signal } = options;
  const { total } = weights;
  const arrived = onProgress && ((loaded: number) => onProgress({ file: "model.safetensors", loaded, total }));
  try {
    const be = await backend();
    return [be, await streamIn(be, { kind: "LanguageModel", config }, weights, { signal, arrived })];
  } catch (e) {
    weights.close();
    throw e;
  }
}

/**
 * Loads a checkpoint of `kind` into the core: bytes in one call (without options), anything else streamed in
 * pieces (load-stream.ts), with progress and cancellation.
 */
export async function loadIn(kind: ModelKind, data: unknown, options?: unknown): Promise<[Backend, ModelOut]> {
  const o = loadOptions(options);
  if ((data instanceof Uint8Array || data instanceof ArrayBuffer) && !o.onProgress && !o.signal) {
    const b = bytes("bytes", data);
    const be = await backend();
    return [be, await be.call("load", { kind, bytes: b })];
  }
  const be = await backend();
  return [be, await loadStream(be, kind, data as CheckpointSource, o)];
}

/** `load`'s and `fromPretrained`'s options, checked. */
export function loadOptions(options: unknown): LoadOptions {
  if (options === undefined) return {};
  const o = object("options", options, "{ onProgress, signal }") as LoadOptions;
  if (o.onProgress !== undefined && typeof o.onProgress !== "function") {
    throw new TypeError(`options.onProgress must be a function, got ${describe(o.onProgress)}`);
  }
  if (o.signal !== undefined && !(typeof AbortSignal === "function" && o.signal instanceof AbortSignal)) {
    throw new TypeError(`options.signal must be an AbortSignal, got ${describe(o.signal)}`);
  }
  return { onProgress: o.onProgress, signal: o.signal };
}
