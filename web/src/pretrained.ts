// A Hugging Face model folder read for LanguageModel.fromPretrained: config.json, the tokenizer
// (tokenizer.json, else vocab.json + merges.txt) and model.safetensors, from a URL prefix (a Hub
// `.../resolve/main/` folder) or from files the user picked or dropped. Each file is read as a stream so that
// progress can be reported as the bytes arrive and an AbortSignal cancels between chunks (and the fetch itself).
//
// Architecture, shapes and tensor names are the core's to judge (the PretrainedLoader model.safetensors streams
// into, qkv/pretrained_loader.h); this file only finds the files, names the ones that are missing, and refuses
// before downloading the weights what can never load: a pytorch_model.bin pickle, and weights too large for the
// wasm core's 4 GiB address space. model.safetensors itself is not read here: it is opened, and streams into the
// core piece by piece as it arrives (load-stream.ts streamIn), never held whole in JS nor in the wasm heap.
import { abortError, readAll } from "./load-stream.js";
import { BpeTokenizer } from "./tokenizer.js";
import type { PretrainedFile, PretrainedOptions, PretrainedSource } from "./types.js";
import { describe } from "./validate.js";

/** A wasm32 core addresses 2^32 bytes at most (wasm-bindings/CMakeLists.txt: MAXIMUM_MEMORY=4GB). */
export const WASM_ADDRESS_SPACE = 2 ** 32;

/** A file of the folder, opened: its size when known and its bytes as they arrive. */
interface Opened {
  total: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
  /** Stops reading (the body of a response that is not read to its end). */
  close(): void;
  /** The whole file when it was given as bytes: used as it is, not copied. */
  whole?: Uint8Array;
}

/** Where the files come from: a URL prefix or files in memory / on disk, by name. */
interface Folder {
  /** For messages: `https://huggingface.co/gpt2/resolve/main/` or `the files given (a, b, c)`. */
  readonly where: string;
  /** Where one file is, for messages: its URL, or its name among the files given. */
  at(name: string): string;
  /** Why a file is missing, for messages: "<url> was not found (HTTP 404)", "it is not among the files given (...)". */
  missing(name: string): string;
  /** The file, or undefined when the folder has none of that name; rejects on any other failure. */
  open(name: string, signal: AbortSignal | undefined): Promise<Opened | undefined>;
}

function isBlob(v: unknown): v is Blob {
  return typeof Blob === "function" && v instanceof Blob;
}
function isFile(v: unknown): v is File {
  return typeof File === "function" && v instanceof File;
}

// ---- a URL prefix ---------------------------------------------------------------------------------------------

function urlFolder(prefix: string | URL): Folder {
  let base: URL;
  try {
    // Relative to the page where there is one (a browser), so "models/gpt2/" works there.
    const page = (globalThis as { location?: { href?: string } }).location?.href;
    base = page === undefined ? new URL(prefix) : new URL(prefix, page);
  } catch {
    throw new TypeError(`source must be an absolute URL of a model folder (or files), got ${describe(String(prefix))}`);
  }
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  const at = (name: string) => new URL(name, base).href;
  const html = new Set<string>(); // files answered with a web page
  return {
    where: base.href,
    at,
    missing: (name) =>
      html.has(name)
        ? `${at(name)} answered with an HTML page, not the file (how many static hosts answer a missing file)`
        : `${at(name)} was not found (HTTP 404)`,
    async open(name, signal) {
      const url = at(name);
      let res: Response;
      try {
        res = await fetch(url, { signal });
      } catch (e) {
        if (signal?.aborted) throw abortError(signal);
        // Node's fetch says "fetch failed" and puts the reason (ECONNREFUSED, a bad certificate) in its cause.
        const why = e instanceof Error ? e.message + (e.cause instanceof Error ? ` (${e.cause.message})` : "") : String(e);
        throw new Error(`qkv: cannot fetch ${url}: ${why}`, { cause: e });
      }
      if (res.status === 404) {
        void res.body?.cancel().catch(() => undefined);
        return undefined;
      }
      if (!res.ok) {
        void res.body?.cancel().catch(() => undefined);
        throw new Error(`qkv: HTTP ${res.status} ${res.statusText}`.trimEnd() + ` for ${url}`);
      }
      // None of a model folder's files is HTML: a page in its place is a host's "not found" (vite preview,
      // single-page-app hosts answer every unknown path with index.html and HTTP 200).
      if ((res.headers.get("content-type") ?? "").startsWith("text/html")) {
        html.add(name);
        void res.body?.cancel().catch(() => undefined);
        return undefined;
      }
      if (!res.body) throw new Error(`qkv: ${url} answered with no body`);
      // Content-Length counts the encoded bytes: unknown when the server compressed the body.
      const length = res.headers.get("content-length");
      const encoded = (res.headers.get("content-encoding") ?? "identity") !== "identity";
      const total = length !== null && !encoded && /^\d+$/.test(length) ? Number(length) : undefined;
      const body = res.body;
      return { total, chunks: readAll(body, signal), close: () => void body.cancel().catch(() => undefined) };
    },
  };
}

// ---- files given --------------------------------------------------------------------------------------------

const utf8 = new TextEncoder();

function openContents(v: PretrainedFile, signal: AbortSignal | undefined): Opened {
  if (isBlob(v)) {
    const stream = v.stream() as ReadableStream<Uint8Array>;
    return { total: v.size, chunks: readAll(stream, signal), close: () => void stream.cancel().catch(() => undefined) };
  }
  const bytes = typeof v === "string" ? utf8.encode(v) : v instanceof ArrayBuffer ? new Uint8Array(v) : v;
  return {
    total: bytes.length,
    chunks: (async function* () {
      yield bytes;
    })(),
    close: () => undefined,
    whole: bytes,
  };
}

/** How deep a picked file sits in the picked folder (webkitRelativePath "gpt2/onnx/config.json": 2). */
function depth(f: File): number {
  const rel = (f as { webkitRelativePath?: string }).webkitRelativePath ?? "";
  return rel.split("/").length - 1;
}

function filesFolder(files: Map<string, PretrainedFile>): Folder {
  const names = [...files.keys()];
  const where = `the files given (${names.length ? names.join(", ") : "none"})`;
  return {
    where,
    at: (name) => `${name} among ${where}`,
    missing: () => `it is not among ${where}`,
    async open(name, signal) {
      if (signal?.aborted) throw abortError(signal);
      const v = files.get(name);
      return v === undefined ? undefined : openContents(v, signal);
    },
  };
}

/** Files by name: a FileList or array of Files (the one nearest the picked folder's top wins a shared name). */
function fromFiles(list: ArrayLike<unknown>): Map<string, PretrainedFile> {
  const byName = new Map<string, File>();
  for (let i = 0; i < list.length; i++) {
    const f = list[i];
    if (!isFile(f)) {
      throw new TypeError(
        `source[${i}] must be a File (a Blob has no name: pass { "config.json": blob, ... } instead), got ${describe(f)}`,
      );
    }
    const had = byName.get(f.name);
    if (had === undefined || depth(f) < depth(had)) byName.set(f.name, f);
  }
  return byName;
}

function fromRecord(record: Record<string, unknown>): Map<string, PretrainedFile> {
  const files = new Map<string, PretrainedFile>();
  for (const [name, v] of Object.entries(record)) {
    if (!(typeof v === "string" || v instanceof Uint8Array || v instanceof ArrayBuffer || isBlob(v))) {
      throw new TypeError(
        `source["${name}"] must be the file's contents (a Blob, a Uint8Array, an ArrayBuffer or its text), got ${describe(v)}`,
      );
    }
    files.set(name, v);
  }
  return files;
}

function folderOf(source: PretrainedSource): Folder {
  if (typeof source === "string" || source instanceof URL) return urlFolder(source);
  if (typeof source === "object" && source !== null && !isBlob(source) && !ArrayBuffer.isView(source) && !(source instanceof ArrayBuffer)) {
    // A FileList or an array: numbered Files with a length. A record of file names has no length.
    if (typeof (source as { length?: unknown }).length === "number") return filesFolder(fromFiles(source as ArrayLike<unknown>));
    return filesFolder(fromRecord(source as Record<string, unknown>));
  }
  throw new TypeError(
    "source must be a model folder's URL (e.g. \"https://huggingface.co/gpt2/resolve/main/\"), a FileList or array " +
      `of Files, or a record { "config.json": ..., "model.safetensors": ..., "tokenizer.json": ... }, got ${describe(source)}`,
  );
}

// ---- reading ------------------------------------------------------------------------------------------------

/** The whole file (a small one: config.json, the tokenizer's), reporting progress after each chunk. */
async function readFile(folder: Folder, name: string, opened: Opened, options: PretrainedOptions): Promise<Uint8Array> {
  const { onProgress, signal } = options;
  const { total } = opened;
  if (opened.whole !== undefined) {
    onProgress?.({ file: name, loaded: opened.whole.length, total });
    return opened.whole;
  }
  // One buffer of the announced size, filled in place: the file is never held twice in JS.
  let whole = total !== undefined ? new Uint8Array(total) : undefined;
  const parts: Uint8Array[] = [];
  let loaded = 0;
  if (total === 0) onProgress?.({ file: name, loaded: 0, total });
  try {
    for await (const chunk of opened.chunks) {
      if (signal?.aborted) break;
      if (whole !== undefined) {
        if (loaded + chunk.length > whole.length) {
          throw new Error(`qkv: ${folder.at(name)} sent more than the ${whole.length} bytes it announced`);
        }
        whole.set(chunk, loaded);
      } else {
        parts.push(chunk.slice());
      }
      loaded += chunk.length;
      onProgress?.({ file: name, loaded, total });
    }
  } catch (e) {
    opened.close();
    if (signal?.aborted) throw abortError(signal);
    throw e;
  }
  if (signal?.aborted) throw abortError(signal);
  if (whole === undefined) {
    whole = new Uint8Array(loaded);
    let at = 0;
    for (const p of parts) {
      whole.set(p, at);
      at += p.length;
    }
  } else if (loaded !== whole.length) {
    throw new Error(`qkv: ${folder.at(name)} ended after ${loaded} of its ${whole.length} bytes: the download was cut short`);
  }
  return whole;
}

const text = new TextDecoder();

async function readText(folder: Folder, name: string, opened: Opened, options: PretrainedOptions): Promise<string> {
  return text.decode(await readFile(folder, name, opened, options));
}

/** Whether the folder has the file (its body, if any, is not read). */
async function has(folder: Folder, name: string, signal: AbortSignal | undefined): Promise<boolean> {
  const f = await folder.open(name, signal);
  f?.close();
  return f !== undefined;
}

function gb(bytes: number): string {
  return `${(bytes / 1e9).toFixed(2)} GB`;
}

/** GPT-2's shape fields of config.json, or undefined when one is missing or not a positive integer the core takes (it then names the field). */
function gpt2Shape(config: Record<string, unknown>): { V: number; P: number; C: number; L: number; F: number } | undefined {
  const n = (k: string) => {
    const v = config[k];
    return typeof v === "number" && Number.isInteger(v) && v > 0 && v <= 2 ** 30 ? v : undefined;
  };
  const V = n("vocab_size"), P = n("n_positions") ?? n("n_ctx"), C = n("n_embd"), L = n("n_layer");
  if (V === undefined || P === undefined || C === undefined || L === undefined) return undefined;
  return { V, P, C, L, F: n("n_inner") ?? 4 * C };
}

/**
 * GPT-2's parameters of one layer (names after "h.N.") and of the model outside its layers (the file's names without
 * "transformer.", qkv's (out, in) shape, and whether Model::quantize packs it: the Linear weights and the tied token
 * embedding). Per layer: ln_1, ln_2 (C each, weight and bias), c_attn (3C x C + 3C), attn c_proj (C x C + C), c_fc
 * (F x C + F), mlp c_proj (C x F + C); outside: wte (V x C), wpe (P x C) and ln_f; the head is tied to wte.
 */
function gpt2Parameters(s: { V: number; P: number; C: number; F: number }): {
  layer: { name: string; rows: number; cols: number; packable: boolean }[];
  outside: { name: string; rows: number; cols: number; packable: boolean }[];
} {
  const { V, P, C, F } = s;
  const p = (name: string, rows: number, cols = 1, packable = false) => ({ name, rows, cols, packable });
  return {
    layer: [
      p("ln_1.weight", C), p("ln_1.bias", C),
      p("attn.c_attn.weight", 3 * C, C, true), p("attn.c_attn.bias", 3 * C),
      p("attn.c_proj.weight", C, C, true), p("attn.c_proj.bias", C),
      p("ln_2.weight", C), p("ln_2.bias", C),
      p("mlp.c_fc.weight", F, C, true), p("mlp.c_fc.bias", F),
      p("mlp.c_proj.weight", C, F, true), p("mlp.c_proj.bias", C),
    ],
    outside: [p("wte.weight", V, C, true), p("wpe.weight", P, C), p("ln_f.weight", C), p("ln_f.bias", C)],
  };
}

/** The tensors' dtypes, by name, of safetensors headers (each a file's first 8 + N bytes); undefined if one does not parse. */
function dtypesOf(heads: Uint8Array[]): Map<string, string> | undefined {
  const dtypes = new Map<string, string>();
  try {
    for (const head of heads) {
      const header = JSON.parse(new TextDecoder().decode(head.subarray(8))) as Record<string, { dtype?: unknown }>;
      for (const [name, t] of Object.entries(header)) if (typeof t?.dtype === "string") dtypes.set(name, t.dtype);
    }
  } catch {
    return undefined;
  }
  return dtypes;
}

/** What the core will hold for a GPT-2's weights, in bytes, and how many matrices of which format it keeps. */
interface Held {
  parameters: number;
  bytes: number;
  /** "F16" or "BF16" matrices kept in half precision (weights: "keep"), by format. */
  kept: Map<string, number>;
}

/**
 * The bytes of the weights the core will hold, laid out as Parameters::layout lays them out (cpp/src/nn/
 * parameters.cpp): a float32 tensor in 16-float (64-byte) steps; a packed F16 / BF16 matrix N rows of
 * round_up(2K, 4) bytes (ops/weight_format.h row_stride), in 64-byte steps. With `dtypes` (weights: "keep", from the
 * file's header) the packable matrices stored F16 / BF16 are kept so, as io::kept_formats chooses them (the tied
 * embedding only when lm_head.weight, if any, is of the same dtype); without, every tensor is float32.
 */
function heldBytes(config: Record<string, unknown>, dtypes: Map<string, string> | undefined): Held | undefined {
  const shape = gpt2Shape(config);
  if (shape === undefined) return undefined;
  const { layer, outside } = gpt2Parameters(shape);
  const dtype = (name: string) => dtypes?.get(name) ?? dtypes?.get(`transformer.${name}`);
  const head = dtype("lm_head.weight");
  const held: Held = { parameters: 0, bytes: 0, kept: new Map() };
  // `times` tensors of this shape, `name`'s dtype in the file deciding its layout.
  const add = (name: string, rows: number, cols: number, packable: boolean, times = 1) => {
    const numel = rows * cols;
    held.parameters += numel * times;
    const d = packable ? dtype(name) : undefined;
    const tiedOk = name !== "wte.weight" || head === undefined || head === d;
    if ((d === "F16" || d === "BF16") && tiedOk) {
      held.bytes += Math.ceil((rows * Math.ceil((2 * cols) / 4) * 4) / 64) * 64 * times;
      held.kept.set(d, (held.kept.get(d) ?? 0) + times);
    } else {
      held.bytes += Math.ceil(numel / 16) * 16 * 4 * times;
    }
  };
  for (const t of outside) add(t.name, t.rows, t.cols, t.packable);
  if (dtypes === undefined) {
    // Every layer alike: one layer's bytes times n_layer (a mistyped n_layer of 1e12 costs nothing here).
    for (const t of layer) add(t.name, t.rows, t.cols, false, shape.L);
  } else {
    // Layer by layer, each matrix's dtype from the file; a config of more layers than the file has tensors is left
    // to the core, which names what is missing.
    if (shape.L * layer.length > dtypes.size) return undefined;
    for (let l = 0; l < shape.L; l++) for (const t of layer) add(`h.${l}.${t.name}`, t.rows, t.cols, t.packable);
  }
  return held;
}

/**
 * Refuses weights the wasm core cannot hold, before any is allocated. The file streams in without being held, so the
 * core holds the model's weights as they will be laid out (float32, or with weights: "keep" the file's F16 / BF16
 * matrices in half precision: `dtypes` from its header) and a staging buffer: they must fit the 4 GiB address space.
 * This is a lower bound (the heap also holds what other models use), so a model refused here can never load,
 * whatever else is freed.
 */
function checkSize(
  where: string,
  config: Record<string, unknown>,
  fileBytes: number | undefined,
  dtypes?: Map<string, string>,
): void {
  const held = heldBytes(config, dtypes);
  if (held === undefined) return; // the core names the missing shape field
  if (held.bytes <= WASM_ADDRESS_SPACE) return;
  const kept = [...held.kept].map(([f, n]) => `${n} ${f} matrices kept in half precision`).join(", ");
  throw new Error(
    `qkv: ${where} is too big for the wasm core: loading it needs at least ${gb(held.bytes)} of ` +
      (kept ? `weights (${kept}, the rest float32)` : "float32 weights") +
      ` for ${held.parameters} parameters` +
      (fileBytes === undefined ? "" : ` (the file's ${gb(fileBytes)} stream in without being held)`) +
      `: ${held.bytes} bytes needed, ${WASM_ADDRESS_SPACE} available (4 GiB, what a wasm32 core can address); ` +
      (dtypes === undefined ? 'weights: "keep" holds F16 / BF16 files in half the size; ' : "") +
      "run it natively (qkv generate --model DIR) or pick a smaller model",
  );
}

/**
 * The weights, opened: their size when known and their bytes as they arrive (to stream into the core), reporting
 * progress per file (onProgress) as they are read. Sharded weights are the shards' files one after another, with
 * the index's text and each shard's header (its first bytes), which the core plans from before any tensor's bytes.
 */
export interface WeightsStream {
  total: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
  /** Stops the downloads (when the weights are not read to their end). */
  close(): void;
  /** Sharded: model.safetensors.index.json's text and every shard's name and first bytes, in the order they stream. */
  sharded?: { index: string; shards: { file: string; head: Uint8Array }[] };
}

/** What fromPretrained needs from a folder. */
export interface PretrainedFiles {
  /** config.json's text. */
  config: string;
  /** model.safetensors (or its shards), opened, not yet read. */
  weights: WeightsStream;
  /** From tokenizer.json, else vocab.json + merges.txt, else undefined. */
  tokenizer: BpeTokenizer | undefined;
}

/**
 * The ids generation stops at by default (LanguageModel.stopTokens), as transformers' generate takes them:
 * config.json's `eos_token_id` (an id or a list of them; ids past its vocab_size left out: the model never makes them), else
 * the tokenizer's end-of-text id, else none.
 */
export function eosTokens(configText: string, tokenizerEos: number | undefined): Int32Array {
  const config = parsed(configText);
  const eos = config?.["eos_token_id"], vocab = config?.["vocab_size"];
  const made = (id: unknown): id is number => Number.isInteger(id) && (id as number) >= 0 && (typeof vocab !== "number" || (id as number) < vocab);
  const ids = (Array.isArray(eos) ? eos : [eos]).filter(made);
  if (ids.length) return Int32Array.from(ids);
  return tokenizerEos === undefined ? new Int32Array(0) : Int32Array.of(tokenizerEos);
}

/** config.json as an object, or undefined when it is not (the core then says what is wrong with it). */
function parsed(configText: string): Record<string, unknown> | undefined {
  try {
    const c: unknown = JSON.parse(configText);
    return typeof c === "object" && c !== null && !Array.isArray(c) ? (c as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Reads config.json, then the tokenizer, then opens model.safetensors (the caller streams it). `checkConfig` is
 * called with config.json's text before anything else is read (LanguageModel.fromPretrained lets the core refuse
 * another model_type there, before a download of weights it could not use).
 */
export async function readPretrained(
  source: PretrainedSource,
  options: PretrainedOptions,
  checkConfig: (config: string) => Promise<void>,
): Promise<PretrainedFiles> {
  const folder = folderOf(source);
  const { signal } = options;
  if (signal?.aborted) throw abortError(signal);
  const missing = (name: string, hint = "") =>
    new Error(`qkv: ${name} is missing: ${folder.missing(name)}${hint}`);

  const configFile = await folder.open("config.json", signal);
  if (!configFile) throw missing("config.json", `; a model folder as the Hugging Face Hub serves it has config.json and model.safetensors`);
  const config = await readText(folder, "config.json", configFile, options);
  await checkConfig(config);

  let tokenizer: BpeTokenizer | undefined;
  const tokenizerJson = await folder.open("tokenizer.json", signal);
  if (tokenizerJson) {
    const json = await readText(folder, "tokenizer.json", tokenizerJson, options);
    tokenizer = await BpeTokenizer.fromJSON(json).catch((e: unknown) => {
      throw new Error(`qkv: ${folder.at("tokenizer.json")}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    });
  } else {
    const vocab = await folder.open("vocab.json", signal);
    if (vocab) {
      const vocabText = await readText(folder, "vocab.json", vocab, options);
      const merges = await folder.open("merges.txt", signal);
      if (!merges) throw missing("merges.txt", " (vocab.json is there: GPT-2's older tokenizer files come as a pair)");
      const mergesText = await readText(folder, "merges.txt", merges, options);
      tokenizer = await BpeTokenizer.fromVocabMerges(vocabText, mergesText).catch((e: unknown) => {
        throw new Error(`qkv: ${folder.at("vocab.json")} + merges.txt: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      });
    }
  }
  if (signal?.aborted) throw abortError(signal);
  // A tokenizer with more ids than the model's vocabulary makes ids the model refuses (as `qkv generate --model DIR`
  // refuses the folder): said before the weights are downloaded. (A larger vocabulary, padded, is fine.)
  const vocab = parsed(config)?.["vocab_size"];
  if (tokenizer && typeof vocab === "number" && tokenizer.size > vocab) {
    throw new Error(
      `qkv: ${folder.at("config.json")}: the tokenizer has ${tokenizer.size} tokens, more than the model's vocabulary of ${vocab} (vocab_size)`,
    );
  }

  const weightsFile = await folder.open("model.safetensors", signal);
  if (!weightsFile) {
    const indexFile = await folder.open(INDEX, signal);
    if (indexFile) {
      const index = await readText(folder, INDEX, indexFile, options);
      return { config, weights: await openShards(folder, index, parsed(config) ?? {}, options), tokenizer };
    }
    if (await has(folder, "pytorch_model.bin", signal)) {
      throw new Error(
        `qkv: there is pytorch_model.bin but no model.safetensors in ${folder.where}: a PyTorch pickle, which qkv does not ` +
          "execute; convert it to safetensors: python -c \"import torch, safetensors.torch as st; " +
          "sd = torch.load('pytorch_model.bin', map_location='cpu'); " +
          "st.save_file({k: v.clone().contiguous() for k, v in sd.items()}, 'model.safetensors')\"",
      );
    }
    throw missing("model.safetensors");
  }
  const { total, close } = weightsFile;
  let chunks = weightsFile.chunks;
  try {
    const c = parsed(config) ?? {};
    const where = folder.at("model.safetensors");
    if (options.weights !== "keep" || (heldBytes(c, undefined)?.bytes ?? 0) <= WASM_ADDRESS_SPACE) {
      checkSize(where, c, total);
    } else {
      // Too big as float32, kept: what the file stores in half precision decides, so its header is read first (its
      // chunks then stream in as they came).
      const s = await readHead(folder, "model.safetensors", weightsFile, signal);
      checkSize(where, c, total, dtypesOf([s.head]));
      chunks = (async function* () {
        yield* s.read;
        for (let r = await s.rest.next(); !r.done; r = await s.rest.next()) yield r.value;
      })();
    }
  } catch (e) {
    close();
    throw e;
  }
  return { config, weights: { total, chunks: reported(chunks, "model.safetensors", total, options), close }, tokenizer };
}

const INDEX = "model.safetensors.index.json";
/** The largest safetensors header read (as Hugging Face's reader: 100 MB); a larger length is a damaged file. */
const MAX_HEADER = 100_000_000;

/** At most this many bytes per progress report: a file given whole is reported (and can be aborted) piece by piece. */
const REPORTED = 4 << 20;

/** `chunks`, reporting `file`'s bytes so far to onProgress as each arrives (views of REPORTED bytes at most). */
async function* reported(
  chunks: AsyncIterable<Uint8Array>,
  file: string,
  total: number | undefined,
  { onProgress }: PretrainedOptions,
): AsyncIterable<Uint8Array> {
  let loaded = 0;
  for await (const chunk of chunks) {
    for (let at = 0; at < chunk.length; at += REPORTED) {
      const part = chunk.length <= REPORTED ? chunk : chunk.subarray(at, Math.min(chunk.length, at + REPORTED));
      loaded += part.length;
      onProgress?.({ file, loaded, total });
      yield part;
    }
  }
}

/** The shard files model.safetensors.index.json's weight_map names, sorted (the order the native loader reads). */
function shardNames(folder: Folder, index: string): string[] {
  let map: unknown;
  try {
    map = (JSON.parse(index) as { weight_map?: unknown } | null)?.weight_map;
  } catch (e) {
    throw new Error(`qkv: ${folder.at(INDEX)} is not valid JSON (${e instanceof Error ? e.message : String(e)})`);
  }
  if (typeof map !== "object" || map === null || Array.isArray(map)) {
    throw new Error(`qkv: ${folder.at(INDEX)}: expected an object with a "weight_map" of tensor names to shard files`);
  }
  const files = new Set<string>();
  for (const [tensor, file] of Object.entries(map)) {
    if (typeof file !== "string" || file.includes("/") || file.includes("..") || file === "") {
      throw new Error(`qkv: ${folder.at(INDEX)}: weight_map["${tensor}"] must be a file of the same folder, got ${describe(file)}`);
    }
    files.add(file);
  }
  if (files.size === 0) throw new Error(`qkv: ${folder.at(INDEX)}: its weight_map names no tensor`);
  return [...files].sort();
}

/** A shard, opened, with the chunks read so far (at least its header) and the iterator that gives the rest. */
interface OpenShard {
  file: string;
  opened: Opened;
  read: Uint8Array[];
  rest: AsyncIterator<Uint8Array>;
  head: Uint8Array;
}

/** Opens `file` and reads chunks until its 8-byte length and its header (8 + N bytes) have arrived. */
async function openShard(folder: Folder, file: string, signal: AbortSignal | undefined): Promise<OpenShard> {
  const opened = await folder.open(file, signal);
  if (!opened) throw new Error(`qkv: ${file} is missing: ${folder.missing(file)} (${INDEX} names it)`);
  return readHead(folder, file, opened, signal);
}

/** Reads `opened`'s chunks until its 8-byte length and its header (8 + N bytes) have arrived. */
async function readHead(folder: Folder, file: string, opened: Opened, signal: AbortSignal | undefined): Promise<OpenShard> {
  const rest = opened.chunks[Symbol.asyncIterator]();
  const read: Uint8Array[] = [];
  let have = 0;
  let need = 8;
  const joined = (n: number) => {
    const out = new Uint8Array(n);
    let at = 0;
    for (const c of read) {
      if (at >= n) break;
      const take = Math.min(c.length, n - at);
      out.set(c.subarray(0, take), at);
      at += take;
    }
    return out;
  };
  try {
    for (let lengthKnown = false; ; ) {
      while (have < need) {
        const r = await rest.next();
        if (signal?.aborted) throw abortError(signal);
        if (r.done) {
          throw new Error(
            `qkv: ${folder.at(file)} ended after ${have} bytes, before its safetensors header (${need} bytes): the file is truncated or not safetensors`,
          );
        }
        read.push(r.value);
        have += r.value.length;
      }
      if (lengthKnown) return { file, opened, read, rest, head: joined(need) };
      const n = Number(new DataView(joined(8).buffer).getBigUint64(0, true));
      if (n > MAX_HEADER) {
        throw new Error(`qkv: ${folder.at(file)} announces a safetensors header of ${n} bytes (at most ${MAX_HEADER}): it is not a safetensors file`);
      }
      need = 8 + n;
      lengthKnown = true;
    }
  } catch (e) {
    opened.close();
    throw signal?.aborted ? abortError(signal) : e;
  }
}

/**
 * The file size a safetensors header gives (8 + its length + the end of its last tensor), or undefined when it does
 * not parse (the core then refuses it, naming what is wrong).
 */
function headerSize(head: Uint8Array): number | undefined {
  try {
    const header = JSON.parse(new TextDecoder().decode(head.subarray(8))) as Record<string, { data_offsets?: unknown }>;
    let end = 0;
    for (const [name, t] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const o = t?.data_offsets;
      if (!Array.isArray(o) || typeof o[1] !== "number") return undefined;
      end = Math.max(end, o[1]);
    }
    return head.length + end;
  } catch {
    return undefined;
  }
}

/**
 * Sharded weights: every shard the index names opened and its header read (the core plans all of them before any
 * tensor's bytes), then one stream of the shards' files one after another, each reported as its own file.
 */
async function openShards(
  folder: Folder,
  index: string,
  config: Record<string, unknown>,
  options: PretrainedOptions,
): Promise<WeightsStream> {
  const { signal } = options;
  const open: OpenShard[] = [];
  const close = () => open.forEach((s) => s.opened.close());
  try {
    for (const file of shardNames(folder, index)) open.push(await openShard(folder, file, signal));
    const sizes = open.map((s) => s.opened.total);
    const total = sizes.every((t) => t !== undefined) ? sizes.reduce((a, b) => a! + b!, 0) : undefined;
    checkSize(folder.at(INDEX), config, total, options.weights === "keep" ? dtypesOf(open.map((s) => s.head)) : undefined);
    // The bytes stream into the core without their boundaries: each shard must be the size its header gives, or
    // the next shard's bytes would be read as its own.
    async function* all(): AsyncIterable<Uint8Array> {
      for (const s of open) {
        const size = headerSize(s.head);
        const chunks = (async function* () {
          let n = 0;
          const counted = function* (c: Uint8Array) {
            n += c.length;
            if (size !== undefined && n > size) {
              throw new Error(`qkv: ${folder.at(s.file)} has more than the ${size} bytes its safetensors header gives`);
            }
            yield c;
          };
          for (const c of s.read) yield* counted(c);
          s.read = [];
          for (let r = await s.rest.next(); !r.done; r = await s.rest.next()) yield* counted(r.value);
          if (size !== undefined && n < size && !signal?.aborted) {
            throw new Error(`qkv: ${folder.at(s.file)} ended after ${n} of the ${size} bytes its safetensors header gives (truncated?)`);
          }
        })();
        yield* reported(chunks, s.file, s.opened.total, options);
      }
    }
    return { total, chunks: all(), close, sharded: { index, shards: open.map((s) => ({ file: s.file, head: s.head })) } };
  } catch (e) {
    close();
    throw e;
  }
}

/**
 * Whether config.json is not a GPT-2's (not a JSON object, or its model_type is not "gpt2"): the core will refuse
 * it, and fromPretrained asks it to before the weights are downloaded.
 */
export function notGpt2(config: string): boolean {
  const c = parsed(config);
  return c === undefined || c["model_type"] !== "gpt2";
}
