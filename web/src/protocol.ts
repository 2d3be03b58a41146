// The message protocol between the browser client (browser.ts) and the Worker (worker.ts):
// `{ type, id, in }` → `{ id, out } | { id, err }`. The same calls are served directly in Node (node.ts).
// Typed arrays in an `out` are fresh copies and cross back as transferables (worker.ts).
// A `stream` call also sends `{ id, token }` for each token as the core makes it, before its `{ id, out }`;
// `{ type: "cancel", id }` ends it after the token being made (it then replies with the tokens made so far).

import type { AdapterFiles, BackendCheck, LoraInfo, MemoryReport, Metrics, ModelKind, QuantActivations, QuantizeOptions, Recompute, RuntimeInfo, StepResult, WeightFormat } from "./types.js";

/** Where the worker finds the build it must load (URLs computed in the main thread). */
export interface LoadPlan {
  threaded: boolean;
  threads: number;
  /** URL of the Emscripten glue (`qkv.js` / `qkv-st.js`), loaded with importScripts. */
  glueUrl: string;
  /** URL of the `.wasm` it instantiates (`qkv.wasm`, `qkv-relaxed.wasm`, `qkv-st.wasm`, `qkv-st-relaxed.wasm`). */
  wasmUrl: string;
  /** Whether `wasmUrl` is a relaxed-SIMD build. */
  relaxedSimd: boolean;
  /** URL of Emscripten's pthread worker script (`qkv.worker.js`); threaded build only. */
  pthreadWorkerUrl?: string;
  /** InitOptions.backend: "wasm" loads no GPU worker. */
  backend: "webgpu" | "wasm" | "auto";
  /** URL of the GPU worker script (`gpu-worker.js`); browsers only. */
  gpuWorkerUrl?: string;
}

/** A config as it crosses: the fields of one of the model configs (types checked by the core's binding). */
export type ConfigIn = Readonly<Record<string, unknown>>;

/** A created or loaded model: its handle and what it reports about itself. */
export interface ModelOut {
  model: number;
  numParameters: number;
  /** The whole configuration, defaults filled in, optimizer fields included. */
  config: Record<string, number | string | boolean>;
  /** Optimizer steps taken (non-zero for a loaded checkpoint). */
  step: number;
  /** The model's LoRA adapters (a checkpoint saved with adapters loads with them), or null. */
  lora: LoraInfo | null;
}

/** What a call that adds, folds, drops or replaces a model's adapters leaves: the adapters and the counts they change. */
export interface LoraOut {
  lora: LoraInfo | null;
  numParameters: number;
  step: number;
}

/** A training or evaluation batch, per model kind. */
export type BatchIn =
  | { kind: "LanguageModel"; inputs: Int32Array; targets: Int32Array; batch: number; seq: number }
  | {
      kind: "Seq2Seq";
      src: Int32Array;
      tgtIn: Int32Array;
      tgtOut: Int32Array;
      batch: number;
      srcLen: number;
      tgtLen: number;
    }
  | { kind: "Classifier"; tokens: Int32Array; labels: Int32Array; batch: number; seq: number };

/** The inputs of a forward pass (predict), per model kind. */
export type InputsIn =
  | { kind: "LanguageModel"; inputs: Int32Array; batch: number; seq: number }
  | { kind: "Seq2Seq"; src: Int32Array; tgtIn: Int32Array; batch: number; srcLen: number; tgtLen: number }
  | { kind: "Classifier"; tokens: Int32Array; batch: number; seq: number };

/** The core's sampling options (`qkv/sampling.h`), every field filled in. */
export interface SamplingIn {
  maxTokens: number;
  temperature: number;
  topK: number;
  topP: number;
  repetitionPenalty: number;
  seed: number;
  stopTokens: Int32Array;
  useCache: boolean;
}

/** Seq2Seq.generate's decoding, defaults filled in. */
export interface DecodeIn {
  bos: number;
  eos: number;
  maxTokens: number;
  beamWidth: number;
  lengthPenalty: number;
  useCache: boolean;
}

/** How a tokenizer is built: from a training text, bytes, or its JSON. */
export type TokenizerIn =
  | { kind: "char"; text: string; specials: SpecialsIn }
  | { kind: "byte"; specials: SpecialsIn }
  | { kind: "word"; text: string; maxVocab: number; specials: SpecialsIn; lowercase: boolean }
  | { kind: "json"; json: string }
  | { kind: "vocabMerges"; vocab: string; merges: string }
  | { kind: "bpe"; text: string; vocabSize: number; specialTokens: string[]; addPrefixSpace: boolean };

/** Which special tokens a new tokenizer has. */
export interface SpecialsIn {
  pad: boolean;
  bos: boolean;
  eos: boolean;
  unk: boolean;
}

/**
 * The tokenizer an `encode` or `decode` runs: its JSON (parsed and kept in a small cache of the core's), or the
 * key it was registered under (by its `tokenizer` call or an earlier ref with `json`), with its JSON when the
 * sender does not know that this core holds it. A key the core does not hold, sent without `json`, fails with
 * an Error named {@link UNKNOWN_TOKENIZER} (dropped from the cache, or a new core): send it again with `json`.
 * So a tokenizer's JSON (over a megabyte for GPT-2's) crosses to a Worker once, not with every call.
 */
export type TokenizerRef = string | { key: string; json?: string };

/** The name of the Error an `encode` or `decode` fails with when the core does not hold the key it names. */
export const UNKNOWN_TOKENIZER = "QkvUnknownTokenizer";

/** A tokenizer as the core built it. Tokenizers cross as their JSON, the core's own format. */
export interface TokenizerOut {
  /** The core's JSON (`Tokenizer::to_json`). */
  json: string;
  /** The key the core holds it under, when the `tokenizer` call gave one. */
  key?: string;
  kind: "char" | "byte" | "word" | "bpe";
  size: number;
  /** -1 when absent. */
  padId: number;
  bosId: number;
  eosId: number;
  unkId: number;
  lowercase: boolean;
  /** Every token's UTF-8 bytes in id order. */
  vocabulary: Uint8Array[];
}

/** Each call: its input and its output. */
export interface Calls {
  init: { in: LoadPlan; out: RuntimeInfo };
  create: { in: { kind: ModelKind; config: ConfigIn }; out: ModelOut };
  load: { in: { kind: ModelKind; bytes: Uint8Array }; out: ModelOut };
  importPretrained: { in: { config: string; weights: Uint8Array }; out: ModelOut };
  /**
   * A checkpoint streamed in chunk by chunk (model.ts loadStream): begin (total -1 when unknown), the chunks in
   * order (each written straight into the model's parameters in the core), then end, which gives the model;
   * abort drops a load midway (the partly built model with it).
   */
  /**
   * With `config` (config.json's text, kind "LanguageModel"): a Hugging Face GPT-2's model.safetensors instead; with
   * `sharded` too, its shards' files one after another (model.safetensors.index.json's text, each shard's name and
   * first bytes in the order they come); `weights` "keep" keeps its F16 / BF16 matrices so (PretrainedOptions.weights).
   */
  loadBegin: {
    in: {
      kind: ModelKind;
      total: number;
      config?: string;
      sharded?: { index: string; shards: { file: string; head: Uint8Array }[] };
      weights?: "f32" | "keep";
    };
    out: { loader: number };
  };
  loadChunk: { in: { loader: number; bytes: Uint8Array }; out: { received: number } };
  loadEnd: { in: { loader: number }; out: ModelOut };
  loadAbort: { in: { loader: number }; out: null };
  trainStep: { in: { model: number; batch: BatchIn }; out: StepResult };
  evaluate: { in: { model: number; batch: BatchIn }; out: Metrics };
  predict: { in: { model: number; inputs: InputsIn }; out: { logits: Float32Array } };
  generate: { in: { model: number; prompt: Int32Array; options: SamplingIn }; out: { tokens: Int32Array } };
  /** generate() one token at a time, each reported as it is made (Backend.stream, TokenMessage). */
  stream: { in: { model: number; prompt: Int32Array; options: SamplingIn }; out: { tokens: Int32Array } };
  seq2seqGenerate: {
    in: { model: number; src: Int32Array; batch: number; srcLen: number; options: DecodeIn };
    out: { tokens: Int32Array };
  };
  attention: {
    in: { model: number; layer: number; head: number; batchIndex: number; kind?: "encoder" | "decoder" | "cross" };
    out: { weights: Float32Array };
  };
  save: { in: { model: number; optimizer: boolean; metadata: Record<string, string> }; out: { bytes: Uint8Array } };
  loadWeights: { in: { model: number; bytes: Uint8Array }; out: null };
  setLearningRate: { in: { model: number; lr: number }; out: null };
  setQuantActivations: { in: { model: number; activations: QuantActivations }; out: null };
  setRecompute: { in: { model: number; mode: Recompute }; out: null };
  recompute: { in: { model: number }; out: { mode: Recompute } };
  quantize: { in: { model: number; options: QuantizeOptions }; out: { formats: Record<string, WeightFormat> } };
  /** LoRA (qkv/lora.h): options arrive checked and filled in (validate.ts checkLora); the core checks them again. */
  addLora: { in: { model: number; options: LoraInfo }; out: LoraOut };
  mergeLora: { in: { model: number }; out: LoraOut };
  removeLora: { in: { model: number }; out: LoraOut };
  /** The adapter alone as PEFT saves it (qkv/lora_files.h save_adapter), in qkv's or GPT-2's names. */
  saveAdapter: { in: { model: number; names: "qkv" | "gpt2" }; out: AdapterFiles };
  loadAdapter: { in: { model: number } & AdapterFiles; out: LoraOut };
  dispose: { in: { model: number }; out: null };
  memory: { in: null; out: MemoryReport };
  /** The runtime as init() reported it, with where models run now (after a GPU loss: the wasm core). */
  info: { in: null; out: RuntimeInfo };
  checkBackend: { in: { group: string }; out: BackendCheck };
  /** For tests: destroys the WebGPU device, as a driver reset would (the qkv Worker only). */
  loseGpuDevice: { in: null; out: null };
  checkpointMetadata: { in: { head: Uint8Array; fileSize: number }; out: { metadata: Record<string, string> } };
  /** Builds a tokenizer; with `key`, the core also holds it under that key for later `encode` and `decode` calls. */
  tokenizer: { in: TokenizerIn & { key?: string }; out: TokenizerOut };
  encode: {
    in: { tokenizer: TokenizerRef; text: string | Uint8Array; bos: boolean; eos: boolean; splitSpecial?: boolean };
    out: { ids: Int32Array };
  };
  decode: { in: { tokenizer: TokenizerRef; ids: Int32Array; skipSpecial: boolean }; out: { bytes: Uint8Array } };
}

export type CallType = keyof Calls;

/** A request, discriminated by `type`. */
export type Request = { [K in CallType]: { type: K; id: number; in: Calls[K]["in"] } }[CallType];

/** The input of a call the engine serves in one go (all but `init` and `stream`), discriminated by `type`. */
export type ModelRequest = Exclude<Request, { type: "init" | "stream" }>;

/** Ends the `stream` call `id` after the token being made; it then replies with the tokens made so far. */
export interface CancelRequest {
  type: "cancel";
  id: number;
}

/** What the client sends the worker. */
export type WorkerMessage = Request | CancelRequest;

/** One new token of the `stream` call `id`, sent as soon as the core made it. */
export interface TokenMessage {
  id: number;
  token: number;
}

/** An error as it crosses postMessage. */
export interface WireError {
  name: string;
  message: string;
  /** The core trapped or aborted: the worker is no longer usable (core.ts isFatal). */
  fatal?: boolean;
}

export type Response = { id: number; out: Calls[CallType]["out"] } | { id: number; err: WireError } | TokenMessage;
