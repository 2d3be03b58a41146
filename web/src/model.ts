// What every model class shares: a handle on a model living in the core, disposal, checkpoints, the
// learning rate and memory. LanguageModel, Seq2Seq and Classifier add their own training and inference.

// The published model.d.ts names Symbol.dispose: this keeps it type-checking in a consumer whose lib is older
// than ESNext (create-vite's ES2022, DOM) without skipLibCheck. Type declarations only; no runtime effect.
/// <reference lib="esnext.disposable" preserve="true" />

import type { Backend, ModelCallType, TokenStream } from "./platform.js";
import type { Calls, LoraOut, ModelOut } from "./protocol.js";
import { backend } from "./runtime.js";
import { tokenizerJSON, type Tokenizer } from "./tokenizer.js";
import { loadStream, streamIn } from "./load-stream.js";
import type { WeightsStream } from "./pretrained.js";
import type {
  AdapterFiles,
  CheckpointSource,
  LoadOptions,
  LoraInfo,
  LoraOptions,
  MemoryUsage,
  ModelKind,
  PretrainedOptions,
  QuantActivations,
  Recompute,
  QuantizeOptions,
  SaveAdapterOptions,
  WeightFormat,
} from "./types.js";
import { abortSignal, boolean, bytes, checkLora, checkOptions, describe, object, positiveFinite, string, stringRecord, text } from "./validate.js";

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
   * `qkv.version`, `qkv.crc32`, `format`, `qkv.quantized`, `qkv.lora`, `qkv.activations`) are refused, as is
   * `qkv.tokenizer` together with
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
  #numParameters: number;
  #lora: LoraInfo | null;

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
    this.#lora = freezeLora(out.lora);
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
    const o = checkOptions("options", options, "{ optimizer?, tokenizer?, metadata? }", "save");
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
      // Its ids must be the model's (as `qkv import` checks): a larger tokenizer makes ids the model refuses.
      const vocab = (this.config as { vocabSize?: unknown; srcVocab?: unknown }).vocabSize ??
        (this.config as { srcVocab?: unknown }).srcVocab;
      const size = (o.tokenizer as { size?: unknown }).size;
      if (typeof vocab === "number" && typeof size === "number" && size > vocab) {
        throw new Error(`options.tokenizer has ${size} tokens, more than the model's vocabulary of ${vocab}`);
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
   * `trainStep` rejects (fine-tuning a quantized base is for LoRA adapters; a model that has adapters keeps training
   * them, its base packed). Rejects, changing nothing, for an
   * unknown format or a model already quantized. Resolves to the packed tensors' formats by name.
   */
  async quantize(options: QuantizeOptions): Promise<Record<string, WeightFormat>> {
    // Only the JS types are checked here; the format's name is the core's to judge (its error names the choices).
    const o = checkOptions(
      "options",
      options,
      '{ weights: "int8" | "q4" | "f16" | "bf16", embedding?: boolean, activations?: "f32" | "int8" }',
      "quantize",
    );
    const weights = string("options.weights", o["weights"]) as WeightFormat;
    const checked: QuantizeOptions = { weights };
    if (o["embedding"] !== undefined) checked.embedding = boolean("options.embedding", o["embedding"]);
    if (o["activations"] !== undefined)
      checked.activations = string("options.activations", o["activations"]) as QuantActivations;
    const out = await callModel(this, "quantize", "quantize", { options: checked });
    return out.formats;
  }

  /**
   * Sets the activations of the products with the int8 and q4 weights ({@link QuantizeOptions.activations}), for
   * a model quantized or loaded quantized; saved with it. Rejects, changing nothing, for an unknown name, or
   * `"int8"` on a model without int8 or q4 weights.
   */
  async setQuantActivations(activations: QuantActivations): Promise<void> {
    await callModel(this, "setQuantActivations", "setQuantActivations", {
      activations: string("activations", activations) as QuantActivations,
    });
  }

  /**
   * Activation recomputation for the following steps ({@link Recompute}). `"on"` keeps only each transformer layer's
   * input for the backward (the language model's layers, the classifier's, seq2seq's encoder), which runs the layer's
   * forward again first: `memory().activations` falls by most of the stack's activations (GPT-2 124M at 8 x 128 rows:
   * about 50 MiB a layer) for one more forward of every layer but the last. `"off"` keeps them all: faster where
   * the memory allows (GPT-2 124M's LoRA step in the package: about 1.1 GB of wasm heap). `"auto"`, the default, is
   * `"on"` while the model has LoRA adapters. Losses, gradients and weights are the same bit for bit in every mode.
   * Rejects, changing nothing, for another name.
   */
  async setRecompute(mode: Recompute): Promise<void> {
    await callModel(this, "setRecompute", "setRecompute", { mode: string("mode", mode) as Recompute });
  }

  /** The recomputation mode set ({@link setRecompute}; `"auto"` unless changed). */
  async recompute(): Promise<Recompute> {
    return (await callModel(this, "recompute", "recompute", {})).mode;
  }

  /**
   * The model's LoRA adapters ({@link addLora}, {@link loadAdapter}, or a checkpoint saved with them), every option
   * filled in; null without adapters. Read-only: the adapters change through the methods below.
   */
  get lora(): LoraInfo | null {
    return this.#lora;
  }

  /**
   * Adds LoRA adapters (README "Fine-tuning with LoRA"): each Linear the targets name then computes
   * `y = x W^T + b + (alpha / rank) · dropout(x) A^T B^T`, with A (rank, in) drawn as PEFT does and B (out, rank)
   * zero, so outputs are unchanged until it trains. From then on `trainStep` (and the {@link Trainer}) trains only the
   * adapters: the base is frozen, with no gradients and no Adam moments (`memory().gradients` and `.optimizer` count
   * the adapters' alone), and may be quantized ({@link quantize}: int8, q4, f16, bf16). The optimizer restarts
   * (step 0) for the adapters. Rejects with an Error naming the option for bad options (rank an integer from 1 to 2^20, alpha
   * finite > 0, dropout in [0, 1), targets from {@link LoraTarget}, each once; q/k/v with qkv overlap), and when the
   * model already has adapters (`removeLora()` or `mergeLora()` first); nothing changes then.
   */
  async addLora(options?: LoraOptions): Promise<void> {
    const o = checkLora(options);
    this.#adapters(await callModel(this, "addLora", "addLora", { options: o }));
  }

  /**
   * Folds the adapters into the float32 base weights (W += (alpha / rank) · B A) and removes them: the model then
   * computes what it computed with them, and trains whole again. Rejects on a quantized base (the folded weights
   * would be quantized again, losing what the adapters learnt: `removeLora()`, or keep the adapters), for a `"head"`
   * adapter on a tied head (the fold would change the embedding lookup too), and on a model without adapters.
   */
  async mergeLora(): Promise<void> {
    this.#adapters(await callModel(this, "mergeLora", "mergeLora", {}));
  }

  /**
   * Drops the adapters: the model is its base again, as it was before {@link addLora} (the base never trains under
   * adapters). Another adapter can then be added or loaded without reloading the base. Rejects on a model without
   * adapters.
   */
  async removeLora(): Promise<void> {
    this.#adapters(await callModel(this, "removeLora", "removeLora", {}));
  }

  /**
   * The adapters alone, as PEFT saves them: `safetensors` is `adapter_model.safetensors` (each adapter's
   * `lora_A.weight` (rank, in) and `lora_B.weight` (out, rank)), `config` is `adapter_config.json`'s text. With
   * `names: "gpt2"` (a model from a GPT-2 folder) they carry GPT-2's module names and `fan_in_fan_out: true`, so
   * `PeftModel.from_pretrained(GPT2LMHeadModel..., folder)` loads them. Rejects on a model without adapters.
   */
  async saveAdapter(options: SaveAdapterOptions = {}): Promise<AdapterFiles> {
    const o = checkOptions("options", options, '{ names?: "qkv" | "gpt2" }', "saveAdapter");
    const names = o.names === undefined ? "qkv" : string("options.names", o.names);
    if (names !== "qkv" && names !== "gpt2") throw new Error(`options.names must be "qkv" or "gpt2", got ${describe(names)}`);
    return await callModel(this, "saveAdapter", "saveAdapter", { names });
  }

  /**
   * Replaces the model's adapters (or adds them) with an adapter saved by {@link saveAdapter}, `qkv train --lora`
   * or PEFT (qkv's or GPT-2's names): rank, alpha, dropout and targets from the config. Rejects, changing nothing,
   * naming every missing or mis-shaped tensor at once, or the config field that is wrong.
   */
  async loadAdapter(files: AdapterFiles): Promise<void> {
    const f = object("files", files, "{ config: string, safetensors: Uint8Array }");
    const config = text("files.config", f.config);
    const safetensors = bytes("files.safetensors", f.safetensors);
    this.#adapters(await callModel(this, "loadAdapter", "loadAdapter", { config, safetensors }));
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

  #adapters(out: LoraOut): void {
    this.#lora = freezeLora(out.lora);
    this.#numParameters = out.numParameters;
  }

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

/**
 * A frozen copy of the core's LoRA options (the getter hands out the same object until the adapters change), alpha
 * and dropout as the shortest decimals of the core's float32 values (0.05, not 0.05000000074505806).
 */
function freezeLora(l: LoraInfo | null): LoraInfo | null {
  if (l === null) return null;
  return Object.freeze({ ...l, alpha: shortestFloat32(l.alpha), dropout: shortestFloat32(l.dropout), targets: Object.freeze([...l.targets]) });
}

/** The number with the fewest significant digits that rounds to the same float32 as `x` (9 digits always do). */
function shortestFloat32(x: number): number {
  for (let digits = 1; digits < 9; digits++) {
    const y = Number(x.toPrecision(digits));
    if (Math.fround(y) === Math.fround(x)) return y;
  }
  return x;
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
  const { signal } = options;
  try {
    const be = await backend();
    // The weights report their progress per file as they are read (pretrained.ts).
    const target = {
      kind: "LanguageModel" as const,
      config,
      ...(weights.sharded ? { sharded: weights.sharded } : {}),
      ...(options.weights === undefined ? {} : { weights: options.weights }),
    };
    return [be, await streamIn(be, target, weights, { signal })];
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

/** `load`'s and `fromPretrained`'s options, checked (`like`: the options the call takes). */
export function loadOptions(options: unknown, like = "{ onProgress?, signal? }", what = "load"): LoadOptions {
  if (options === undefined) return {};
  const o = checkOptions("options", options, like, what) as LoadOptions;
  if (o.onProgress !== undefined && typeof o.onProgress !== "function") {
    throw new TypeError(`options.onProgress must be a function, got ${describe(o.onProgress)}`);
  }
  return { onProgress: o.onProgress, signal: abortSignal("options.signal", o.signal) };
}

/** `fromPretrained`'s options, checked: `load`'s and `weights`, checked before any file is read. */
export function pretrainedOptions(options: unknown): PretrainedOptions {
  const o = loadOptions(options, '{ onProgress?, signal?, weights?: "f32" | "keep" }', "fromPretrained") as PretrainedOptions;
  const weights = options === undefined ? undefined : (options as PretrainedOptions).weights;
  if (weights !== undefined && weights !== "f32" && weights !== "keep") {
    throw new TypeError(
      `options.weights must be "f32" (every tensor converted to float32) or "keep" (F16 / BF16 matrices kept in half ` +
        `precision), got ${describe(weights)}`,
    );
  }
  return weights === undefined ? o : { ...o, weights };
}
