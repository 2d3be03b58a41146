// The Embind module (the C++ core compiled to wasm) and the direct API over it: model handles by id,
// one `switch` from a request to a core call. Used in Node on the caller's thread and in the browser Worker.

import type { TokenStream } from "./platform.js";
import { UNKNOWN_TOKENIZER, type Calls, type ConfigIn, type ModelOut, type ModelRequest, type TokenizerIn, type TokenizerOut, type TokenizerRef } from "./protocol.js";
import type { AdapterFiles, BackendCheck, LoraInfo, MemoryUsage, Metrics, ModelKind, QuantActivations, QuantizeOptions, Recompute, RuntimeInfo, StepResult, WeightFormat } from "./types.js";
import { VERSION } from "./version.js";

/** What every Embind model class has. */
interface CoreModelBase {
  save(withOptimizer: boolean, metadata: Record<string, string>): Uint8Array;
  loadWeights(bytes: Uint8Array): void;
  setLearningRate(lr: number): void;
  setQuantActivations(activations: QuantActivations): void;
  setRecompute(mode: Recompute): void;
  recompute(): Recompute;
  numParameters(): number;
  step(): number;
  config(): Record<string, number | string | boolean>;
  memory(): MemoryUsage;
  quantize(options: QuantizeOptions): void;
  weightFormats(): Record<string, WeightFormat>;
  addLora(options: LoraInfo): void;
  mergeLora(): void;
  removeLora(): void;
  /** The adapters' options, or null without adapters. */
  loraOptions(): LoraInfo | null;
  saveAdapter(names: "qkv" | "gpt2"): AdapterFiles;
  loadAdapter(config: string, safetensors: Uint8Array): void;
  delete(): void;
}

/** A `LanguageModel` object of the Embind module. */
export interface CoreLanguageModel extends CoreModelBase {
  trainStep(inputs: Int32Array, targets: Int32Array, batch: number, seq: number): StepResult;
  evaluate(inputs: Int32Array, targets: Int32Array, batch: number, seq: number): Metrics;
  logits(inputs: Int32Array, batch: number, seq: number): Float32Array;
  attention(layer: number): Float32Array;
  generate(prompt: Int32Array, options: Calls["generate"]["in"]["options"]): Int32Array;
  startGeneration(prompt: Int32Array, options: Calls["stream"]["in"]["options"]): CoreGeneration | null;
}

/** A `Generation` object of the Embind module: generate() one token per next(), -1 once it ended. */
export interface CoreGeneration {
  next(): number;
  delete(): void;
}

/** A `Seq2Seq` object of the Embind module. */
export interface CoreSeq2Seq extends CoreModelBase {
  trainStep(src: Int32Array, tgtIn: Int32Array, tgtOut: Int32Array, batch: number, srcLen: number, tgtLen: number): StepResult;
  evaluate(src: Int32Array, tgtIn: Int32Array, tgtOut: Int32Array, batch: number, srcLen: number, tgtLen: number): Metrics;
  logits(src: Int32Array, tgtIn: Int32Array, batch: number, srcLen: number, tgtLen: number): Float32Array;
  generate(src: Int32Array, batch: number, srcLen: number, options: Calls["seq2seqGenerate"]["in"]["options"]): Int32Array;
  attention(kind: string, layer: number): Float32Array;
}

/** A `Classifier` object of the Embind module. */
export interface CoreClassifier extends CoreModelBase {
  trainStep(tokens: Int32Array, labels: Int32Array, batch: number, seq: number): StepResult;
  evaluate(tokens: Int32Array, labels: Int32Array, batch: number, seq: number): Metrics;
  logits(tokens: Int32Array, batch: number, seq: number): Float32Array;
  attention(layer: number): Float32Array;
}

/** A `Tokenizer` object of the Embind module. */
export interface CoreTokenizer {
  toJSON(): string;
  encode(text: string | Uint8Array, bos: boolean, eos: boolean, splitSpecial: boolean): Int32Array;
  decode(ids: Int32Array, skipSpecial: boolean): Uint8Array;
  info(): Omit<TokenizerOut, "json">;
  delete(): void;
}

/**
 * A checkpoint loader of the Embind module (wasm-bindings/model.h JsLoader): `buffer(max)` is a view of the wasm
 * heap where up to `max` next bytes go (valid until the next call into the core), `commit(n)` takes them.
 * On error: undefined, false or null, with the error left for `takeError`.
 */
export interface CoreLoader<M> {
  buffer(max: number): Uint8Array | undefined;
  commit(n: number): boolean;
  received(): number;
  finish(): M | null;
  delete(): void;
}

/** An Embind model class: factories return null on error (the error is left for `takeError`). */
interface CoreModelClass<M> {
  create(config: ConfigIn): M | null;
  load(bytes: Uint8Array): M | null;
}

type Specials = { pad: boolean; bos: boolean; eos: boolean; unk: boolean };

/** The module `createQkvCore()` resolves to (see wasm-bindings/). */
export interface QkvCore {
  version(): string;
  simd(): string;
  threaded(): boolean;
  maxThreads(): number;
  setThreads(n: number): void;
  numThreads(): number;
  heapSize(): number;
  heapMax(): number;
  heapUsed(): number;
  /** The error of the last failed call (the binding never throws through wasm frames), cleared on read. */
  takeError(): { message: string; typeError: boolean } | undefined;
  checkpointMetadata(head: Uint8Array, fileSize: number): Record<string, string>;
  /** Opens the WebGPU executor's ring; returns its control block's address (0 on error: takeError()). */
  webgpuConnect(maxBufferSize: number, maxStorageBufferBindingSize: number, adapter: string, ringWords: number): number;
  /** The GPU worker is gone: models on it reject with `why`; new models go to the wasm core. */
  webgpuFail(why: string): void;
  /** Every op of the running executor against a trusted one (ops/backend_check.h); undefined on error. */
  checkBackend(group: string): BackendCheck | undefined;
  /** Where new models go: "webgpu" once connected, else "wasm". */
  device(): "webgpu" | "wasm";
  /** The shared memory of the threaded build (Emscripten's Module.wasmMemory). */
  wasmMemory?: WebAssembly.Memory;
  LanguageModel: CoreModelClass<CoreLanguageModel> & {
    /** A Hugging Face GPT-2 from config.json's text and model.safetensors' bytes (qkv/import.h). */
    importPretrained(config: string, weights: Uint8Array): CoreLanguageModel | null;
  };
  Seq2Seq: CoreModelClass<CoreSeq2Seq>;
  Classifier: CoreModelClass<CoreClassifier>;
  LanguageModelLoader: new (total: number) => CoreLoader<CoreLanguageModel>;
  /** A Hugging Face GPT-2's model.safetensors streamed in (qkv/pretrained_loader.h); null on error (takeError). */
  PretrainedLoader: {
    /** weights: "f32" or "keep" (qkv/import.h PretrainedWeights). */
    open(config: string, total: number, weights: string): CoreLoader<CoreLanguageModel> | null;
    /** Sharded weights: the index's text and every shard's name and first bytes, in the order their files stream. */
    openSharded(
      config: string,
      index: string,
      shards: { file: string; head: Uint8Array }[],
      weights: string,
    ): CoreLoader<CoreLanguageModel> | null;
  };
  Seq2SeqLoader: new (total: number) => CoreLoader<CoreSeq2Seq>;
  ClassifierLoader: new (total: number) => CoreLoader<CoreClassifier>;
  Tokenizer: {
    charLevel(text: string, specials: Specials): CoreTokenizer | null;
    byteLevel(specials: Specials): CoreTokenizer | null;
    wordLevel(text: string, maxVocab: number, specials: Specials, lowercase: boolean): CoreTokenizer | null;
    fromJSON(json: string): CoreTokenizer | null;
    fromVocabMerges(vocab: string, merges: string): CoreTokenizer | null;
    trainBpe(text: string, vocabSize: number, specialTokens: string[], addPrefixSpace: boolean): CoreTokenizer | null;
  };
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

/** Turns whatever was thrown into an Error. */
export function toError(e: unknown): Error {
  if (e instanceof Error) return e;
  if (typeof e === "number") {
    return new Error(`qkv: the core threw an untranslated C++ exception (pointer ${e}); please report this`);
  }
  return new Error(String(e));
}

/**
 * Whether an error means the core itself is broken rather than one call's input: a WebAssembly trap
 * (unreachable, out-of-bounds access, stack overflow) or an Emscripten abort, after which the wasm
 * module's memory can no longer be trusted. A qkv::Error, a TypeError or an out-of-memory from the core is
 * not fatal: the core reports those and stays usable.
 */
export function isFatal(e: unknown): boolean {
  return e instanceof WebAssembly.RuntimeError || (e instanceof Error && /^Aborted\(/.test(e.message));
}

/** The error every call gets once the core has crashed, naming the cause and what to do. */
export function crashError(cause: unknown): Error {
  return new Error(
    `qkv: the core crashed (${toError(cause).message}); the models it held are lost. ` +
      "Call init() again to start a new core, then create or load the models again",
  );
}

/** Checks the loaded core's version and thread count, returning what runs. */
export function describeCore(
  core: QkvCore,
  threads: number,
  relaxedSimd: boolean,
  gpu: Pick<RuntimeInfo, "backend" | "adapter" | "fallbackReason"> = { backend: "wasm" },
): RuntimeInfo {
  const version = core.version();
  if (version !== VERSION) {
    throw new Error(
      `qkv: the loaded .wasm is version ${version} but this package is ${VERSION}; ` +
        `serve the wasm/ files of the same qkv release (or point init({ wasmPath }) at them)`,
    );
  }
  const threaded = core.threaded();
  if (threaded && core.numThreads() !== threads) core.setThreads(threads);
  return { threaded, threads: core.numThreads(), simd: core.simd(), relaxedSimd, version, ...gpu };
}

/** (query length, key length) of one attention map of the last forward pass. */
type MapShape = [number, number];

/** The shape of a model's last forward pass, where known: what its attention maps are. */
interface ForwardShape {
  batch: number;
  /** LanguageModel and Classifier self-attention; Seq2Seq encoder self-attention. */
  self?: MapShape;
  decoder?: MapShape;
  cross?: MapShape;
}

type Entry =
  | { kind: "LanguageModel"; core: CoreLanguageModel; heads: number; last?: ForwardShape }
  | { kind: "Seq2Seq"; core: CoreSeq2Seq; heads: number; last?: ForwardShape }
  | { kind: "Classifier"; core: CoreClassifier; heads: number; last?: ForwardShape };

/** A generation that stream() steps through; closed (its core object deleted) at its end or its model's dispose. */
interface Stepping {
  model: number;
  core: CoreGeneration;
  closed: boolean;
}

let ticks: MessageChannel | undefined;
const ticking: (() => void)[] = [];

/**
 * Resolves in a later task of the event loop, after the messages, I/O and timers already queued: a stop(),
 * another call, or (in Node) a write to a socket runs between two tokens of a stream.
 */
export function nextTask(): Promise<void> {
  const immediate = (globalThis as { setImmediate?: (f: () => void) => unknown }).setImmediate;
  if (typeof immediate === "function") return new Promise((resolve) => void immediate(resolve));
  // A Worker has no setImmediate; a MessageChannel message is a task that no timer clamping delays.
  if (!ticks) {
    ticks = new MessageChannel();
    ticks.port1.onmessage = () => ticking.shift()?.();
  }
  const channel = ticks;
  return new Promise((resolve) => {
    ticking.push(resolve);
    channel.port2.postMessage(null);
  });
}

/**
 * Keeps each model's calls in the order they were made while it streams. A stream holds its model until it
 * ends, as one generate() call does: a call on that model made meanwhile (a trainStep, a predict, another
 * stream) waits for it, so a stream's tokens are always generate()'s, whatever the page does meanwhile. Calls
 * on other models, and every call while its model is not streaming, run at once (in Node, synchronously
 * inside the call, as before). Node's backend and the Worker each keep one.
 */
export class CallOrder {
  /** Per model: what its next call must wait for (settles, never rejects, when the model is free). */
  private readonly tails = new Map<number, Promise<void>>();

  /** Runs `f` now when `model` is free (or undefined: no model), else after the model's earlier calls. */
  call<T>(model: number | undefined, f: () => T): T | Promise<T> {
    const tail = model === undefined ? undefined : this.tails.get(model);
    if (model === undefined || !tail) return f();
    const p = tail.then(f);
    this.hold(model, p);
    return p;
  }

  /** Starts a stream on `model` now or after its earlier calls; the model is held until the stream ends. */
  stream(model: number, start: () => TokenStream): TokenStream {
    const tail = this.tails.get(model);
    if (!tail) {
      const s = start();
      this.hold(model, s.result);
      return s;
    }
    let s: TokenStream | undefined;
    let stopped = false;
    const result = tail.then(() => {
      s = start();
      if (stopped) s.stop();
      return s.result;
    });
    this.hold(model, result);
    return {
      result,
      stop: () => {
        stopped = true;
        s?.stop();
      },
    };
  }

  private hold(model: number, busy: Promise<unknown>): void {
    const tail = busy.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(model, tail);
    void tail.then(() => {
      if (this.tails.get(model) === tail) this.tails.delete(model);
    });
  }
}

/** The model a call's input names, if any. */
export function modelOf(input: unknown): number | undefined {
  if (typeof input !== "object" || input === null || !("model" in input)) return undefined;
  return typeof input.model === "number" ? input.model : undefined;
}

/** At most this many tokenizers stay parsed in the core (by key, or by JSON; see TokenizerRef). */
const TOKENIZER_CACHE = 8;

/** Model handles over one loaded core. */
export class Engine {
  private readonly models = new Map<number, Entry>();
  /** Parsed tokenizers by key ("tok-...") or JSON ("{..."), least recently used first. */
  private readonly tokenizers = new Map<string, CoreTokenizer>();
  private readonly generations = new Set<Stepping>();
  private readonly loaders = new Map<number, { kind: ModelKind; core: CoreLoader<Entry["core"]> }>();
  private nextId = 1;

  /** What init() resolved to; info() reports it with the GPU's state of now. */
  runtime: RuntimeInfo | undefined;
  /** Why the GPU went away after init (device lost, GPU worker stopped): models now run on the wasm core. */
  gpuGone: string | undefined;

  constructor(readonly core: QkvCore) {}

  /** Serves one request: the single switch of the direct API. */
  handle(req: ModelRequest): Calls[ModelRequest["type"]]["out"] {
    switch (req.type) {
      case "create":
      case "load": {
        const cls = this.core[req.in.kind] as CoreModelClass<Entry["core"]>;
        const m = this.run(() => (req.type === "create" ? cls.create(req.in.config) : cls.load(req.in.bytes)));
        if (!m) throw new Error(`qkv: the core returned no ${req.in.kind} and no error; please report this`);
        return this.add(req.in.kind, m);
      }
      case "importPretrained": {
        const { config, weights } = req.in;
        const m = this.run(() => this.core.LanguageModel.importPretrained(config, weights));
        if (!m) throw new Error("qkv: the core returned no LanguageModel and no error; please report this");
        return this.add("LanguageModel", m);
      }
      case "loadBegin": {
        const { kind, total, config, sharded } = req.in;
        const weights = req.in.weights ?? "f32";
        const Loader = this.core[`${kind}Loader`] as new (total: number) => CoreLoader<Entry["core"]>;
        // A pretrained GPT-2's loader judges config.json (and a sharded one every shard's header) first: a refusal
        // is this call's error.
        const pretrained = this.core.PretrainedLoader;
        const core =
          config === undefined
            ? new Loader(total)
            : this.run(() =>
                sharded
                  ? pretrained.openSharded(config, sharded.index, sharded.shards, weights)
                  : pretrained.open(config, total, weights),
              );
        if (!core) throw new Error("qkv: the core returned no PretrainedLoader and no error; please report this");
        const loader = this.nextId++;
        this.loaders.set(loader, { kind, core });
        return { loader };
      }
      case "loadChunk": {
        const { loader, bytes } = req.in;
        const l = this.loader(loader);
        try {
          // Each piece is copied once: from the chunk into the core's destination (a parameter, or the staging
          // of a tensor that is converted on the way).
          for (let at = 0; at < bytes.length; ) {
            const to = this.run(() => l.core.buffer(bytes.length - at))!;
            if (to.length === 0) {
              throw new Error(
                `qkv: the checkpoint ended at byte ${l.core.received()} but ${bytes.length - at} more bytes came, expected no bytes after the last tensor`,
              );
            }
            to.set(bytes.subarray(at, at + to.length));
            this.run(() => l.core.commit(to.length));
            at += to.length;
          }
        } catch (e) {
          this.dropLoader(loader);  // a failed loader is spent
          throw e;
        }
        return { received: l.core.received() };
      }
      case "loadEnd": {
        const l = this.loader(req.in.loader);
        let m: Entry["core"] | null;
        try {
          m = this.run(() => l.core.finish());
        } finally {
          this.dropLoader(req.in.loader);
        }
        if (!m) throw new Error(`qkv: the core returned no ${l.kind} and no error; please report this`);
        return this.add(l.kind, m);
      }
      case "loadAbort":
        this.dropLoader(req.in.loader);
        return null;
      case "trainStep": {
        const e = this.get(req.in.model);
        const b = req.in.batch;
        return this.forward(e, b, () => this.batchCall(e, b, "trainStep") as StepResult);
      }
      case "evaluate": {
        const e = this.get(req.in.model);
        const b = req.in.batch;
        return this.forward(e, b, () => this.batchCall(e, b, "evaluate") as Metrics);
      }
      case "predict": {
        const e = this.get(req.in.model);
        const x = req.in.inputs;
        const logits = this.forward(e, x, () => {
          if (e.kind === "LanguageModel" && x.kind === "LanguageModel") return e.core.logits(x.inputs, x.batch, x.seq);
          if (e.kind === "Seq2Seq" && x.kind === "Seq2Seq") {
            return e.core.logits(x.src, x.tgtIn, x.batch, x.srcLen, x.tgtLen);
          }
          if (e.kind === "Classifier" && x.kind === "Classifier") return e.core.logits(x.tokens, x.batch, x.seq);
          throw mismatch(e.kind, x.kind);
        });
        return { logits };
      }
      case "generate": {
        const e = this.get(req.in.model);
        if (e.kind !== "LanguageModel") throw mismatch(e.kind, "LanguageModel");
        const { prompt, options } = req.in;
        // The shape of generate's forward passes is the core's business: attention() asks for a predict().
        e.last = undefined;
        return { tokens: this.run(() => e.core.generate(prompt, options)) };
      }
      case "seq2seqGenerate": {
        const e = this.get(req.in.model);
        if (e.kind !== "Seq2Seq") throw mismatch(e.kind, "Seq2Seq");
        const { src, batch, srcLen, options } = req.in;
        e.last = undefined;
        const tokens = this.run(() => e.core.generate(src, batch, srcLen, options));
        // The encoder ran once on the whole source; the decoder's last shape is the core's business.
        e.last = { batch, self: [srcLen, srcLen] };
        return { tokens };
      }
      case "attention":
        return { weights: this.attention(req.in) };
      case "save": {
        const { model, optimizer, metadata } = req.in;
        return { bytes: this.run(() => this.get(model).core.save(optimizer, metadata)) };
      }
      case "loadWeights": {
        const { model, bytes } = req.in;
        this.run(() => this.get(model).core.loadWeights(bytes));
        return null;
      }
      case "setLearningRate": {
        const { model, lr } = req.in;
        this.run(() => this.get(model).core.setLearningRate(lr));
        return null;
      }
      case "setQuantActivations": {
        const { model, activations } = req.in;
        this.run(() => this.get(model).core.setQuantActivations(activations));
        return null;
      }
      case "setRecompute": {
        const { model, mode } = req.in;
        this.run(() => this.get(model).core.setRecompute(mode));
        return null;
      }
      case "recompute":
        return { mode: this.get(req.in.model).core.recompute() };
      case "quantize": {
        const { model, options } = req.in;
        const core = this.get(model).core;
        this.run(() => core.quantize(options));
        return { formats: this.run(() => core.weightFormats()) };
      }
      case "addLora": {
        const { model, options } = req.in;
        const core = this.get(model).core;
        this.run(() => core.addLora(options));
        return loraOut(core);
      }
      case "mergeLora":
      case "removeLora": {
        const core = this.get(req.in.model).core;
        this.run(() => (req.type === "mergeLora" ? core.mergeLora() : core.removeLora()));
        return loraOut(core);
      }
      case "saveAdapter": {
        const { model, names } = req.in;
        const core = this.get(model).core;
        return this.run(() => core.saveAdapter(names));
      }
      case "loadAdapter": {
        const { model, config, safetensors } = req.in;
        const core = this.get(model).core;
        this.run(() => core.loadAdapter(config, safetensors));
        return loraOut(core);
      }
      case "dispose": {
        const e = this.models.get(req.in.model);
        if (e) {
          this.models.delete(req.in.model);
          // A core Generation must not outlive its model: its streams end (and reject, saying why).
          for (const g of this.generations) if (g.model === req.in.model) this.close(g);
          e.core.delete();
        }
        return null;
      }
      case "info": {
        const r = this.runtime!;
        return this.gpuGone === undefined || r.backend !== "webgpu"
          ? r
          : { ...r, backend: "wasm", fallbackReason: this.gpuGone };
      }
      case "checkBackend":
        return this.run(() => this.core.checkBackend(req.in.group))!;
      case "loseGpuDevice":
        throw new Error("qkv: there is no GPU worker here (WebGPU runs in the browser's qkv Worker)");
      case "memory":
        return {
          models: [...this.models].map(([id, e]) => ({ id, kind: e.kind, bytes: e.core.memory() })),
          heapBytes: this.core.heapSize(),
          heapUsedBytes: this.core.heapUsed(),
          heapMaxBytes: this.core.heapMax(),
        };
      case "checkpointMetadata": {
        const { head, fileSize } = req.in;
        return { metadata: this.run(() => this.core.checkpointMetadata(head, fileSize)) };
      }
      case "tokenizer":
        return this.buildTokenizer(req.in);
      case "encode": {
        const { tokenizer, text, bos, eos, splitSpecial } = req.in;
        const t = this.tokenizer(tokenizer);
        return { ids: this.run(() => t.encode(text, bos, eos, splitSpecial ?? false)) };
      }
      case "decode": {
        const { tokenizer, ids, skipSpecial } = req.in;
        const t = this.tokenizer(tokenizer);
        return { bytes: this.run(() => t.decode(ids, skipSpecial)) };
      }
    }
  }

  /**
   * Generates token by token (Backend.stream): each step makes one token in the core, hands it to `onToken`
   * and gives the thread back to the event loop, where stop() and calls on other models run (CallOrder keeps
   * this model's own calls for after the stream). Throws at once for invalid arguments (the core checks them
   * when the generation starts).
   */
  stream(input: Calls["stream"]["in"], onToken: (token: number) => void): TokenStream {
    const e = this.get(input.model);
    if (e.kind !== "LanguageModel") throw mismatch(e.kind, "LanguageModel");
    const { prompt, options } = input;
    const core = this.run(() => e.core.startGeneration(prompt, options));
    if (!core) throw new Error("qkv: the core returned no generation and no error; please report this");
    const g: Stepping = { model: input.model, core, closed: false };
    this.generations.add(g);
    let stopped = false;
    const result = (async () => {
      const tokens: number[] = [];
      try {
        for (;;) {
          // First, so that no token reaches onToken before stream() has returned.
          await nextTask();
          if (g.closed) {
            throw new Error("qkv: the LanguageModel was disposed during generation; its generation ended");
          }
          if (stopped) break;
          e.last = undefined; // a step runs the model: attention() asks for a predict()
          const token = this.run(() => core.next());
          if (token < 0) break;
          tokens.push(token);
          onToken(token);
        }
      } catch (err) {
        try {
          this.close(g);
        } catch {
          // After a trap the core may fail again here: the first error is the one to report.
        }
        throw err;
      }
      this.close(g);
      return Int32Array.from(tokens);
    })();
    return {
      result,
      stop: () => {
        stopped = true;
      },
    };
  }

  private close(g: Stepping): void {
    this.generations.delete(g);
    if (g.closed) return;
    g.closed = true;
    g.core.delete();
  }

  /** Calls into the core and throws the error it recorded, if any (see takeError in wasm-bindings/). */
  private run<T>(f: () => T): T {
    const out = f();
    const err = this.core.takeError();
    if (err) throw err.typeError ? new TypeError(err.message) : new Error(err.message);
    return out;
  }

  /**
   * Runs a forward pass and records its shape for attention(). A failed call may or may not have run the
   * forward (a check fails before it; a non-finite loss after it), so it leaves the shape unknown.
   */
  private forward<T>(e: Entry, x: Calls["predict"]["in"]["inputs"], f: () => T): T {
    e.last = undefined;
    const out = this.run(f);
    if (x.kind === "Seq2Seq") {
      e.last = { batch: x.batch, self: [x.srcLen, x.srcLen], decoder: [x.tgtLen, x.tgtLen], cross: [x.tgtLen, x.srcLen] };
    } else {
      e.last = { batch: x.batch, self: [x.seq, x.seq] };
    }
    return out;
  }

  private batchCall(e: Entry, b: Calls["trainStep"]["in"]["batch"], method: "trainStep" | "evaluate"): StepResult | Metrics {
    if (e.kind === "LanguageModel" && b.kind === "LanguageModel") {
      return e.core[method](b.inputs, b.targets, b.batch, b.seq);
    }
    if (e.kind === "Seq2Seq" && b.kind === "Seq2Seq") {
      return e.core[method](b.src, b.tgtIn, b.tgtOut, b.batch, b.srcLen, b.tgtLen);
    }
    if (e.kind === "Classifier" && b.kind === "Classifier") {
      return e.core[method](b.tokens, b.labels, b.batch, b.seq);
    }
    throw mismatch(e.kind, b.kind);
  }

  /** One head's (Tq, Tk) map, for one row of the last batch. */
  private attention(a: Calls["attention"]["in"]): Float32Array {
    const e = this.get(a.model);
    const kind = e.kind === "Seq2Seq" ? a.kind : undefined;
    if (e.kind === "Seq2Seq" && kind === undefined) {
      throw new Error('kind is missing: a Seq2Seq has "encoder", "decoder" and "cross" attention');
    }
    // The shape first: after generate() (KV caches, no full forward) the core has no weights to show.
    const shape = kind === "decoder" ? e.last?.decoder : kind === "cross" ? e.last?.cross : e.last?.self;
    if (!e.last || !shape) {
      throw new Error(
        "attention() shows the last trainStep, evaluate or predict batch, and generate() has run since " +
          "(or the last call failed): call predict() on the sequence first",
      );
    }
    const weights = this.run(() =>
      e.kind === "Seq2Seq" ? e.core.attention(kind ?? "encoder", a.layer) : e.core.attention(a.layer),
    );
    const [tq, tk] = shape;
    const B = e.last.batch;
    const H = e.heads;
    if (weights.length !== B * H * tq * tk) {
      throw new Error(`qkv: attention has ${weights.length} weights, expected ${B}*${H}*${tq}*${tk}; please report this`);
    }
    if (a.head >= H) throw new Error(`head = ${a.head} is out of range: expected 0 <= head < ${H}`);
    if (a.batchIndex >= B) {
      throw new Error(`batchIndex = ${a.batchIndex} is out of range: expected 0 <= batchIndex < ${B} (the last batch)`);
    }
    const start = (a.batchIndex * H + a.head) * tq * tk;
    return weights.slice(start, start + tq * tk);
  }

  private loader(id: number): { kind: ModelKind; core: CoreLoader<Entry["core"]> } {
    const l = this.loaders.get(id);
    if (!l) throw new Error(`qkv: no checkpoint load ${id} in progress (it failed, was aborted or has ended)`);
    return l;
  }

  private dropLoader(id: number): void {
    const l = this.loaders.get(id);
    if (!l) return;
    this.loaders.delete(id);
    l.core.delete();  // with the partly loaded model, if any
  }

  private add(kind: ModelKind, m: Entry["core"]): ModelOut {
    const config = m.config();
    const model = this.nextId++;
    this.models.set(model, { kind, core: m, heads: Number(config.heads) } as Entry);
    return { model, numParameters: m.numParameters(), config, step: m.step(), lora: m.loraOptions() };
  }

  private get(model: number): Entry {
    const e = this.models.get(model);
    if (!e) throw new Error(`qkv: model ${model} does not exist (it was disposed)`);
    return e;
  }

  private buildTokenizer(t: TokenizerIn & { key?: string }): TokenizerOut {
    const T = this.core.Tokenizer;
    const tok = this.run(() => {
      switch (t.kind) {
        case "char": return T.charLevel(t.text, t.specials);
        case "byte": return T.byteLevel(t.specials);
        case "word": return T.wordLevel(t.text, t.maxVocab, t.specials, t.lowercase);
        case "json": return T.fromJSON(t.json);
        case "vocabMerges": return T.fromVocabMerges(t.vocab, t.merges);
        case "bpe": return T.trainBpe(t.text, t.vocabSize, t.specialTokens, t.addPrefixSpace);
      }
    });
    if (!tok) throw new Error("qkv: the core returned no tokenizer and no error; please report this");
    const json = tok.toJSON();
    this.remember(t.key ?? json, tok);
    return { json, ...(t.key !== undefined && { key: t.key }), ...tok.info() };
  }

  /**
   * The parsed tokenizer `ref` names (kept for the next calls, the least recently used dropped): by its JSON, or
   * by its key, parsing the JSON sent with it when the key is not held.
   */
  private tokenizer(ref: TokenizerRef): CoreTokenizer {
    const key = typeof ref === "string" ? ref : ref.key;
    const json = typeof ref === "string" ? ref : ref.json;
    let t = this.tokenizers.get(key);
    if (!t) {
      if (json === undefined) {
        const e = new Error(`qkv: this core does not hold tokenizer ${key} (it left the cache, or the core is new): send its JSON`);
        e.name = UNKNOWN_TOKENIZER;
        throw e;
      }
      t = this.run(() => this.core.Tokenizer.fromJSON(json)) ?? undefined;
      if (!t) throw new Error("qkv: the core returned no tokenizer and no error; please report this");
    }
    this.remember(key, t);
    return t;
  }

  private remember(key: string, t: CoreTokenizer): void {
    const old = this.tokenizers.get(key);
    if (old && old !== t) old.delete();
    this.tokenizers.delete(key); // re-inserted last: the most recently used
    this.tokenizers.set(key, t);
    while (this.tokenizers.size > TOKENIZER_CACHE) {
      const [dropped, oldest] = this.tokenizers.entries().next().value as [string, CoreTokenizer];
      this.tokenizers.delete(dropped);
      oldest.delete();
    }
  }
}

/** What a model reports after its adapters changed. */
function loraOut(core: CoreModelBase): Calls["addLora"]["out"] {
  return { lora: core.loraOptions(), numParameters: core.numParameters(), step: core.step() };
}

function mismatch(model: ModelKind, batch: ModelKind): Error {
  return new Error(`qkv: a ${batch} call reached a ${model}; please report this`);
}
