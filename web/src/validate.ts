// Type checks at the JS surface: what the package needs to build a call (typed arrays, integers, shapes).
// They name the argument and what was expected. Everything that needs the model (token ids vs vocabSize,
// dModel divisible by heads, seq <= context, sampling ranges, checkpoint contents) is the core's (C++) job.

import type { SamplingIn } from "./protocol.js";
import type { BatchShape, LoraInfo, LoraTarget } from "./types.js";

/** "a Float32Array", "an Array", "a Uint8Array" (said "you-int"). */
function article(name: string): string {
  return `${/^(?!uint)[aeiou]/i.test(name) ? "an" : "a"} ${name}`;
}

/** Describes a value for an error message: `"abc"` (string), `1.5`, `an Array`, `null`. */
export function describe(v: unknown): string {
  if (v === null) return "null";
  if (v === undefined) return "undefined";
  if (typeof v === "string") return `${JSON.stringify(v.length > 20 ? v.slice(0, 20) + "…" : v)} (a string)`;
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint") return `${String(v)} (a ${typeof v})`;
  if (typeof v === "object") {
    const name = (v as { constructor?: { name?: string } }).constructor?.name;
    return name ? article(name) : "an object";
  }
  return article(typeof v);
}

/** A TypeError when `v` is not of the JS type the argument needs, else an Error (a bad value). */
function invalid(v: unknown, jsType: string, message: string): Error {
  return typeof v === jsType ? new Error(message) : new TypeError(message);
}

/**
 * The largest integer the core takes where it asks for an int: Embind converts a number to a C++ int modulo 2^32, so
 * that a layer of 2 ** 32 + 1 would silently be layer 1.
 */
export const INT32_MAX = 2147483647;

export function positiveInt(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1) {
    throw invalid(v, "number", `${name} must be a positive integer, got ${describe(v)}`);
  }
  if (v > INT32_MAX) throw new Error(`${name} must be a positive integer no larger than ${INT32_MAX}, got ${describe(v)}`);
  return v;
}

export function nonNegativeInt(name: string, v: unknown, max = INT32_MAX): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > max) {
    throw invalid(v, "number", `${name} must be an integer in [0, ${max}], got ${describe(v)}`);
  }
  return v;
}

export function integer(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v)) throw invalid(v, "number", `${name} must be an integer, got ${describe(v)}`);
  if (v > INT32_MAX || v < -INT32_MAX - 1) {
    throw new Error(`${name} must be an integer from ${-INT32_MAX - 1} to ${INT32_MAX}, got ${describe(v)}`);
  }
  return v;
}

/** The largest float32: the core takes these numbers as floats, where a larger double is infinity. */
const FLOAT32_MAX = 3.4028234663852886e38;

export function positiveFinite(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw invalid(v, "number", `${name} must be a finite number > 0, got ${describe(v)}`);
  }
  if (v > FLOAT32_MAX) throw new Error(`${name} must be at most ${FLOAT32_MAX} (a float32), got ${describe(v)}`);
  return v;
}

export function finiteNumber(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw invalid(v, "number", `${name} must be a finite number, got ${describe(v)}`);
  }
  if (Math.abs(v) > FLOAT32_MAX) throw new Error(`${name} must be within +-${FLOAT32_MAX} (a float32), got ${describe(v)}`);
  return v;
}

export function boolean(name: string, v: unknown): boolean {
  if (typeof v !== "boolean") throw new TypeError(`${name} must be true or false, got ${describe(v)}`);
  return v;
}

export function string(name: string, v: unknown): string {
  if (typeof v !== "string") throw new TypeError(`${name} must be a string, got ${describe(v)}`);
  return v;
}

/**
 * A string that is well-formed UTF-16 (no lone surrogate), so that it has a UTF-8 form: the core reads
 * text as UTF-8, and Embind's conversion would silently merge a lone surrogate with the next character.
 */
export function text(name: string, v: unknown): string {
  const s = string(name, v);
  const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.exec(s);
  if (lone) {
    const cp = lone[0].charCodeAt(0).toString(16).toUpperCase();
    throw new Error(`${name} has a lone surrogate U+${cp} at index ${lone.index}: expected well-formed Unicode text`);
  }
  return s;
}

export function object(name: string, v: unknown, like: string): Record<string, unknown> {
  if (typeof v !== "object" || v === null) throw new TypeError(`${name} must be an object like ${like}, got ${describe(v)}`);
  return v as Record<string, unknown>;
}

/** The keys a shape like `{ maxTokens, bos?, names?: "qkv" | "gpt2", targets?: ["qkv", ...] }` lists at its top level. */
function keysOf(like: string): string[] {
  const keys: string[] = [];
  let depth = 0, quoted = false, expectKey = false;
  for (let i = 0; i < like.length; i++) {
    const c = like.charAt(i);
    if (quoted) {
      if (c === '"') quoted = false;
    } else if (c === '"') {
      quoted = true;
    } else if (c === "{" || c === "[" || c === "(") {
      depth++;
      if (depth === 1) expectKey = true;
    } else if (c === "}" || c === "]" || c === ")") {
      depth--;
    } else if (c === "," && depth === 1) {
      expectKey = true;
    } else if (expectKey && depth === 1 && /[A-Za-z_$]/.test(c)) {
      const key = /^[A-Za-z_$][\w$]*/.exec(like.slice(i))![0];
      keys.push(key);
      i += key.length - 1;
      expectKey = false;
    }
  }
  return keys;
}

/**
 * An options object: `object`, and each of its keys one that `like` lists. A misspelt option (`optimiser`, `embeddings`,
 * `skipSpecialTokens`) would otherwise be ignored without a word, and the call do what the user did not ask.
 */
export function checkOptions(name: string, v: unknown, like: string, what: string): Record<string, unknown> {
  const o = object(name, v, like);
  const known = keysOf(like);
  for (const k of Object.keys(o)) {
    if (!known.includes(k)) throw new TypeError(`${name}.${k} is not ${article(what)} option (known: ${known.join(", ")})`);
  }
  return o;
}

export function int32Array(name: string, v: unknown): Int32Array {
  if (!(v instanceof Int32Array)) {
    throw new TypeError(`${name} must be an Int32Array of token ids, got ${describe(v)}`);
  }
  return v;
}

/** An Int32Array as is, or an array of integers copied into one. */
export function int32Like(name: string, v: unknown): Int32Array {
  if (v instanceof Int32Array) return v;
  if (Array.isArray(v)) {
    const out = new Int32Array(v.length);
    v.forEach((x, i) => {
      if (typeof x !== "number" || !Number.isInteger(x)) {
        throw invalid(x, "number", `${name}[${i}] must be an integer, got ${describe(x)}`);
      }
      if (x < -0x80000000 || x > 0x7fffffff) {
        throw new Error(`${name}[${i}] must be an integer from -2147483648 to 2147483647 (an int32), got ${describe(x)}`);
      }
      out[i] = x;
    });
    return out;
  }
  throw new TypeError(`${name} must be an Int32Array or an array of integers, got ${describe(v)}`);
}

/** Checkpoint bytes: a Uint8Array (a Node Buffer is one) or an ArrayBuffer. */
export function bytes(name: string, v: unknown): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  throw new TypeError(`${name} must be a Uint8Array or an ArrayBuffer (the bytes of a safetensors file), got ${describe(v)}`);
}

/** `config` is an object (its fields are checked by the core's binding, which knows every config). */
export function checkConfig(config: unknown, like: string): Readonly<Record<string, unknown>> {
  return { ...object("config", config, like) };
}

/**
 * Splits `length` ids into rows: `batch` and `seq` from the shape where given, the other derived.
 * With neither, `batch` is `defaultBatch`.
 */
export function rows(
  what: string,
  length: number,
  shape: BatchShape | undefined,
  defaultBatch = 1,
  seqName = "seq",
): { batch: number; seq: number } {
  if (shape !== undefined) checkOptions("shape", shape, `{ batch?, ${seqName}? }`, "shape");
  if (length === 0) throw new Error(`${what} must not be empty (${what}.length is 0)`);
  let batch = shape?.batch;
  let seq = shape?.seq;
  if (batch !== undefined) positiveInt("batch", batch);
  if (seq !== undefined) positiveInt(seqName, seq);
  if (batch === undefined && seq === undefined) batch = defaultBatch;
  if (seq === undefined) {
    if (length % batch! !== 0) throw new Error(`${what}.length (${length}) is not a multiple of batch (${batch})`);
    seq = length / batch!;
  } else if (batch === undefined) {
    if (length % seq !== 0) throw new Error(`${what}.length (${length}) is not a multiple of ${seqName} (${seq})`);
    batch = length / seq;
  }
  if (length !== batch! * seq) {
    throw new Error(`${what}.length must be batch * ${seqName} = ${batch} * ${seq} = ${batch! * seq}, got ${length}`);
  }
  return { batch: batch!, seq };
}

/** Checks a (inputs, targets) batch and resolves its (batch, seq) shape. */
export function checkBatch(
  inputs: unknown,
  targets: unknown,
  shape: BatchShape | undefined,
): { inputs: Int32Array; targets: Int32Array; batch: number; seq: number } {
  const x = int32Array("inputs", inputs);
  const y = int32Array("targets", targets);
  const { batch, seq } = rows("inputs", x.length, shape);
  if (y.length !== x.length) {
    throw new Error(`targets.length must equal inputs.length (${x.length}), got ${y.length}`);
  }
  return { inputs: x, targets: y, batch, seq };
}

/**
 * An optional `signal` option: an AbortSignal, or an object that behaves as one (`aborted`, `addEventListener`);
 * every call that takes a signal checks it here.
 */
export function abortSignal(name: string, v: unknown): AbortSignal | undefined {
  if (v === undefined) return undefined;
  if (typeof AbortSignal !== "undefined" && v instanceof AbortSignal) return v;
  const s = v as { aborted?: unknown; addEventListener?: unknown } | null;
  if (typeof v === "object" && s !== null && typeof s.aborted === "boolean" && typeof s.addEventListener === "function") {
    return v as AbortSignal;
  }
  throw new TypeError(`${name} must be an AbortSignal, got ${describe(v)}`);
}

/** Checks generate()'s arguments and fills the defaults of the sampling options (`stopTokens`: the model's). */
export function checkGenerate(
  prompt: unknown,
  options: unknown,
  stopTokens: Int32Array = new Int32Array(0),
): {
  prompt: Int32Array;
  options: SamplingIn;
  onToken?: (token: number, index: number) => void;
  signal?: AbortSignal;
} {
  const p = int32Array("prompt", prompt);
  const o = checkOptions(
    "options",
    options,
    "{ maxTokens, temperature?, topK?, topP?, repetitionPenalty?, seed?, stopTokens?, useCache?, onToken?, signal? }",
    "generate",
  );
  const maxTokens = positiveInt("options.maxTokens", o.maxTokens);
  let temperature = 1;
  if (o.temperature !== undefined) {
    if (typeof o.temperature !== "number" || !Number.isFinite(o.temperature) || o.temperature < 0) {
      throw invalid(o.temperature, "number", `options.temperature must be a finite number >= 0 (0: greedy), got ${describe(o.temperature)}`);
    }
    temperature = finiteNumber("options.temperature", o.temperature);
  }
  if (o.onToken !== undefined && typeof o.onToken !== "function") {
    throw new TypeError(`options.onToken must be a function (token, index) => void, got ${describe(o.onToken)}`);
  }
  const signal = abortSignal("options.signal", o.signal);
  return {
    ...(o.onToken !== undefined && { onToken: o.onToken as (token: number, index: number) => void }),
    ...(signal !== undefined && { signal }),
    prompt: p,
    options: {
      maxTokens,
      temperature,
      topK: o.topK === undefined ? 0 : nonNegativeInt("options.topK", o.topK),
      topP: o.topP === undefined ? 1 : finiteNumber("options.topP", o.topP),
      repetitionPenalty: o.repetitionPenalty === undefined ? 1 : finiteNumber("options.repetitionPenalty", o.repetitionPenalty),
      seed: o.seed === undefined ? Math.floor(Math.random() * 0x7fffffff) : nonNegativeInt("options.seed", o.seed, Number.MAX_SAFE_INTEGER),
      stopTokens: o.stopTokens === undefined ? stopTokens : int32Like("options.stopTokens", arrayOf(o.stopTokens)),
      useCache: o.useCache === undefined ? true : boolean("options.useCache", o.useCache),
    },
  };
}

/** An ArrayLike (a typed array, or any object with a length and indexed values) as an Int32Array or a plain array
 * (so that int32Like can check it). */
function arrayOf(v: unknown): unknown {
  if (v instanceof Int32Array || Array.isArray(v)) return v;
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return Array.from(v as unknown as ArrayLike<number>);
  if (typeof v === "object" && v !== null && Number.isSafeInteger((v as { length?: unknown }).length)) {
    return Array.from(v as ArrayLike<unknown>);
  }
  return v;
}

/** Checks { layer, head, batchIndex? } of attention(). */
/** `attention()`'s options; `kind` (which of a Seq2Seq's attentions) only where `withKind`. */
export function checkAttention(
  options: unknown,
  withKind = false,
): { layer: number; head: number; batchIndex: number; kind: unknown } {
  const o = checkOptions(
    "options",
    options,
    withKind ? '{ layer, head, batchIndex?, kind: "encoder" | "decoder" | "cross" }' : "{ layer, head, batchIndex? }",
    "attention",
  );
  return {
    layer: nonNegativeInt("options.layer", o.layer),
    head: nonNegativeInt("options.head", o.head),
    batchIndex: o.batchIndex === undefined ? 0 : nonNegativeInt("options.batchIndex", o.batchIndex),
    kind: o.kind,
  };
}

/**
 * Extra checkpoint metadata: a plain object of strings, copied (into an object without a prototype, so a
 * key such as `"__proto__"` stays a key). Keys and values must be well-formed text, as they are stored as
 * UTF-8. Which keys are allowed is the core's decision (it owns the keys it writes).
 */
export function stringRecord(name: string, v: unknown): Record<string, string> {
  const proto: unknown = typeof v === "object" && v !== null ? Object.getPrototypeOf(v) : undefined;
  if (proto !== Object.prototype && proto !== null) {
    throw new TypeError(`${name} must be an object of string values like { "key": "value" }, got ${describe(v)}`);
  }
  const out = Object.create(null) as Record<string, string>;
  for (const [key, value] of Object.entries(v as object)) {
    text(`${name} key ${JSON.stringify(key)}`, key);
    out[key] = text(`${name}[${JSON.stringify(key)}]`, value);
  }
  return out;
}

/** Every LoraTarget, in the order the docs list them. */
export const LORA_TARGETS: readonly LoraTarget[] = ["q", "k", "v", "qkv", "out", "up", "down", "head"];

/** The largest LoRA rank (the core's kMaxLoraRank, 2^20). */
const MAX_LORA_RANK = 1 << 20;

/**
 * `addLora`'s options checked and every default filled in (rank 8, alpha 16, dropout 0, targets qkv and out, seed 0;
 * the core's LoraOptions defaults): rank an integer from 1 to 2^20, alpha finite > 0, dropout in [0, 1), targets a non-empty
 * array of distinct LoraTargets, seed an integer >= 0; an unknown key is refused (a misspelt `rnak` would otherwise
 * train at the default rank). Which targets a model has, and q/k/v against qkv, are the core's to judge.
 */
export function checkLora(options: unknown): LoraInfo {
  const like = '{ rank?, alpha?, dropout?, targets?: ["qkv", "out", ...], seed? }';
  const o = checkOptions("options", options === undefined ? {} : options, like, "LoRA");
  const rank = o.rank === undefined ? 8 : positiveInt("options.rank", o.rank);
  // The core's kMaxLoraRank: the largest rank a saved checkpoint's "qkv.lora" reads back.
  if (rank > MAX_LORA_RANK) throw new Error(`options.rank must be an integer from 1 to ${MAX_LORA_RANK}, got ${rank}`);
  const alpha = o.alpha === undefined ? 16 : positiveFinite("options.alpha", o.alpha);
  // The core keeps alpha and dropout as float32: judged as they will be held (1e-46 is 0 there, 0.99999999 is 1).
  const f = Math.fround(alpha);
  if (f === 0 || !Number.isFinite(f)) {
    throw new Error(`options.alpha must be a finite number > 0 as a float32, got ${alpha}, which is ${f} in float32`);
  }
  let dropout = 0;
  if (o.dropout !== undefined) {
    const d = o.dropout;
    if (typeof d !== "number" || !Number.isFinite(d) || d < 0 || Math.fround(d) >= 1) {
      throw invalid(d, "number", `options.dropout must be a number in [0, 1), got ${describe(d)}`);
    }
    dropout = d;
  }
  const seed = o.seed === undefined ? 0 : nonNegativeInt("options.seed", o.seed, Number.MAX_SAFE_INTEGER);
  let targets: LoraTarget[] = ["qkv", "out"];
  if (o.targets !== undefined) {
    if (!Array.isArray(o.targets) || o.targets.length === 0) {
      throw invalid(o.targets, "object", `options.targets must be a non-empty array of ${LORA_TARGETS.map((t) => JSON.stringify(t)).join(", ")}, got ${describe(o.targets)}`);
    }
    targets = o.targets.map((t: unknown, i: number) => {
      if (typeof t !== "string" || !(LORA_TARGETS as readonly string[]).includes(t)) {
        throw invalid(t, "string", `options.targets[${i}] must be one of ${LORA_TARGETS.map((x) => JSON.stringify(x)).join(", ")}, got ${describe(t)}`);
      }
      return t as LoraTarget;
    });
    const twice = targets.find((t, i) => targets.indexOf(t) !== i);
    if (twice !== undefined) throw new Error(`options.targets names "${twice}" twice: expected each target at most once`);
  }
  return { rank, alpha, dropout, targets, seed };
}
