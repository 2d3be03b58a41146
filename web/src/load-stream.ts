// Loading a checkpoint as it arrives: a `fetch` Response, a File/Blob or any stream of bytes goes to the core in
// pieces (Calls.loadBegin / loadChunk / loadEnd), each written there straight into the model's parameters, so
// neither JS nor the wasm heap ever holds the whole file (io/checkpoint.h CheckpointSink; for a Hugging Face
// GPT-2's model.safetensors, qkv/pretrained_loader.h, which fromPretrained streams through streamIn). Progress
// after each piece; an AbortSignal cancels between pieces (and cancels the source's pending read).
import type { Backend } from "./platform.js";
import type { ModelOut } from "./protocol.js";
import type { CheckpointSource, LoadOptions, ModelKind } from "./types.js";
import { describe } from "./validate.js";

/** The pieces the core takes per call: large enough that a call costs nothing beside its copy. */
const PIECE = 4 << 20;

/** The signal's reason as the Error a cancelled load rejects with. */
export function abortError(signal: AbortSignal): Error {
  const r: unknown = signal.reason;
  return r instanceof Error ? r : new DOMException("qkv: the load was aborted", "AbortError");
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw abortError(signal);
}

interface Opened {
  total: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
}

/** The chunks of a ReadableStream; an abort cancels the pending read (which then ends the stream). */
export async function* readAll(stream: ReadableStream<Uint8Array>, signal: AbortSignal | undefined): AsyncIterable<Uint8Array> {
  const reader = stream.getReader();
  const cancel = () => void reader.cancel().catch(() => undefined);
  signal?.addEventListener("abort", cancel);
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        return;
      }
      if (!(value instanceof Uint8Array)) {
        throw new TypeError(`qkv: a stream of bytes must give Uint8Array chunks, got ${describe(value)}`);
      }
      yield value;
    }
  } finally {
    signal?.removeEventListener("abort", cancel);
    if (!finished) cancel();  // stopped early (an error, an abort): the source need not go on
    reader.releaseLock();
  }
}

/** Views of a buffer already in memory, PIECE bytes each. */
function* slices(b: Uint8Array): Iterable<Uint8Array> {
  for (let at = 0; at < b.length; at += PIECE) yield b.subarray(at, Math.min(b.length, at + PIECE));
}

function isResponse(v: unknown): v is Response {
  return typeof Response === "function" && v instanceof Response;
}
function isBlob(v: unknown): v is Blob {
  return typeof Blob === "function" && v instanceof Blob;
}
function isStream(v: unknown): v is ReadableStream<Uint8Array> {
  return typeof ReadableStream === "function" && v instanceof ReadableStream;
}

function open(source: CheckpointSource, signal: AbortSignal | undefined): Opened {
  if (source instanceof Uint8Array) return { total: source.length, chunks: toAsync(slices(source)) };
  if (source instanceof ArrayBuffer) return open(new Uint8Array(source), signal);
  if (isResponse(source)) {
    if (!source.ok) throw new Error(`qkv: cannot load ${source.url || "the response"}: HTTP ${source.status} ${source.statusText}`.trim());
    if (!source.body) throw new Error(`qkv: cannot load ${source.url || "the response"}: it has no body`);
    // Content-Length counts the encoded bytes: unknown when the server compressed the body.
    const length = source.headers.get("content-length");
    const encoded = (source.headers.get("content-encoding") ?? "identity") !== "identity";
    const total = length !== null && !encoded && /^\d+$/.test(length) ? Number(length) : undefined;
    return { total, chunks: readAll(source.body, signal) };
  }
  if (isBlob(source)) return { total: source.size, chunks: readAll(source.stream() as ReadableStream<Uint8Array>, signal) };
  if (isStream(source)) return { total: undefined, chunks: readAll(source, signal) };
  throw new TypeError(
    `source must be a Uint8Array, an ArrayBuffer, a Response, a Blob or a ReadableStream of a safetensors file, got ${describe(source)}`,
  );
}

async function* toAsync(it: Iterable<Uint8Array>): AsyncIterable<Uint8Array> {
  yield* it;
}

/**
 * Pieces of PIECE bytes (the last shorter) from chunks of any size, all in one buffer of their own: what crosses
 * to a Worker is then that piece alone (a view's whole buffer would be cloned with it). The buffer is reused: the
 * caller is done with a piece when it asks for the next (a call has copied it into the core, or postMessage has
 * cloned it), so the load holds one piece however long the file. `arrived` hears of each chunk as it comes.
 */
async function* pieces(chunks: AsyncIterable<Uint8Array>, arrived?: (bytes: number) => void): AsyncIterable<Uint8Array> {
  const piece = new Uint8Array(PIECE);
  let used = 0;
  let told = 0; // bytes of the current chunk not yet reported as arrived
  const tell = () => {
    if (told > 0) arrived?.(told);
    told = 0;
  };
  for await (const chunk of chunks) {
    for (let at = 0; at < chunk.length; ) {
      const n = Math.min(PIECE - used, chunk.length - at);
      piece.set(chunk.subarray(at, at + n), used);
      used += n;
      at += n;
      told += n;
      if (used === PIECE) {
        tell(); // a chunk larger than a piece (bytes given whole) reports piece by piece
        yield piece;
        used = 0;
      }
    }
    tell();
  }
  if (used > 0) yield piece.slice(0, used);  // a buffer of its own size: the last piece is cloned alone
}

/**
 * What streams into the core: a checkpoint of `kind`, or (with `config`, config.json's text) a Hugging Face GPT-2's
 * model.safetensors, or with `sharded` too its shards' files one after another (the index and every shard's header).
 */
export interface StreamTarget {
  kind: ModelKind;
  config?: string;
  sharded?: { index: string; shards: { file: string; head: Uint8Array }[] };
  weights?: "f32" | "keep";
}

/** How a stream reports: `taken` after each piece the core has taken, `arrived` after each chunk of the source. */
export interface StreamOptions {
  taken?: (loaded: number) => void;
  arrived?: (loaded: number) => void;
  signal?: AbortSignal;
}

/**
 * Streams `chunks` (`total` bytes when known) into a new model in the core: loadBegin, a loadChunk per piece, loadEnd.
 * On any failure or abort the core's loader is dropped with its partly written model, so nothing stays in the core.
 */
export async function streamIn(
  be: Backend,
  target: StreamTarget,
  opened: { total: number | undefined; chunks: AsyncIterable<Uint8Array> },
  options: StreamOptions,
): Promise<ModelOut> {
  const { signal } = options;
  throwIfAborted(signal);
  const begin = {
    kind: target.kind,
    total: opened.total ?? -1,
    ...(target.config === undefined ? {} : { config: target.config }),
    ...(target.sharded === undefined ? {} : { sharded: target.sharded }),
    ...(target.weights === undefined ? {} : { weights: target.weights }),
  };
  const { loader } = await be.call("loadBegin", begin);
  let taken = 0;
  let arrived = 0;
  const onChunk = options.arrived && ((n: number) => options.arrived!((arrived += n)));
  try {
    for await (const piece of pieces(opened.chunks, onChunk)) {
      throwIfAborted(signal);
      await be.call("loadChunk", { loader, bytes: piece });
      taken += piece.length;
      options.taken?.(taken);
    }
    throwIfAborted(signal);
    return await be.call("loadEnd", { loader });
  } catch (e) {
    // The core's loader is gone after its own error; after an abort or a failed source it is dropped here.
    await be.call("loadAbort", { loader }).catch(() => undefined);
    throw signal?.aborted ? abortError(signal) : e;
  }
}

/** Streams `source` into a new model of `kind` in the core (model.ts loadIn). */
export async function loadStream(
  be: Backend,
  kind: ModelKind,
  source: CheckpointSource,
  options: LoadOptions,
): Promise<ModelOut> {
  const { onProgress, signal } = options;
  throwIfAborted(signal);
  const opened = open(source, signal);
  return streamIn(be, { kind }, opened, { signal, taken: onProgress && ((loaded) => onProgress({ loaded, total: opened.total })) });
}
