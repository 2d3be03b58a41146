// Type checks at the JS surface. They name the argument and what was expected; range checks that need the
// model (token ids vs vocabSize, d_model divisible by heads, seq <= context) are the core's (C++) job.

import type { BatchShape, GenerateOptions, LanguageModelConfig } from "./types.js";

/** Describes a value for an error message: `"abc"` (string), `1.5`, `an Array`, `null`. */
export function describe(v: unknown): string {
  if (v === null) return "null";
  if (v === undefined) return "undefined";
  if (typeof v === "string") return `${JSON.stringify(v.length > 20 ? v.slice(0, 20) + "…" : v)} (a string)`;
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint") return `${String(v)} (a ${typeof v})`;
  if (typeof v === "object") {
    const name = (v as { constructor?: { name?: string } }).constructor?.name;
    return name ? `a ${name}` : "an object";
  }
  return `a ${typeof v}`;
}

export function positiveInt(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1) {
    throw new Error(`${name} must be a positive integer, got ${describe(v)}`);
  }
  return v;
}

export function nonNegativeInt(name: string, v: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > max) {
    throw new Error(`${name} must be an integer in [0, ${max}], got ${describe(v)}`);
  }
  return v;
}

export function positiveFinite(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw new Error(`${name} must be a finite number > 0, got ${describe(v)}`);
  }
  return v;
}

export function finiteNumber(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new Error(`${name} must be a finite number, got ${describe(v)}`);
  }
  return v;
}

export function int32Array(name: string, v: unknown): Int32Array {
  if (!(v instanceof Int32Array)) {
    throw new Error(`${name} must be an Int32Array of token ids, got ${describe(v)}`);
  }
  return v;
}

const CONFIG_INTS = ["vocabSize", "context", "dModel", "heads", "layers"] as const;

/** Checks the types of a model config and returns a plain copy holding only known fields. */
export function checkConfig(config: unknown): LanguageModelConfig {
  if (typeof config !== "object" || config === null) {
    throw new Error(`config must be an object like { vocabSize, context, dModel, heads, layers }, got ${describe(config)}`);
  }
  const c = config as Record<string, unknown>;
  const out: Record<string, number> = {};
  for (const k of CONFIG_INTS) out[k] = positiveInt(`config.${k}`, c[k]);
  if (c.dFF !== undefined) out.dFF = positiveInt("config.dFF", c.dFF);
  if (c.seed !== undefined) out.seed = nonNegativeInt("config.seed", c.seed, 0xffffffff);
  if (c.lr !== undefined) out.lr = positiveFinite("config.lr", c.lr);
  if (c.eps !== undefined) out.eps = positiveFinite("config.eps", c.eps);
  if (c.gradClip !== undefined) {
    if (typeof c.gradClip !== "number" || !Number.isFinite(c.gradClip) || c.gradClip < 0) {
      throw new Error(`config.gradClip must be a finite number >= 0, got ${describe(c.gradClip)}`);
    }
    out.gradClip = c.gradClip;
  }
  for (const k of ["beta1", "beta2", "weightDecay"] as const) {
    if (c[k] !== undefined) out[k] = finiteNumber(`config.${k}`, c[k]);
  }
  const known = new Set<string>([...CONFIG_INTS, "dFF", "seed", "lr", "eps", "beta1", "beta2", "weightDecay", "gradClip"]);
  for (const k of Object.keys(c)) {
    if (!known.has(k)) throw new Error(`config.${k} is not a LanguageModel option (known: ${[...known].join(", ")})`);
  }
  return out as unknown as LanguageModelConfig;
}

/** Checks a (inputs, targets) batch and resolves its (batch, seq) shape. */
export function checkBatch(
  inputs: unknown,
  targets: unknown,
  shape: BatchShape | undefined,
): { inputs: Int32Array; targets: Int32Array; batch: number; seq: number } {
  const x = int32Array("inputs", inputs);
  const y = int32Array("targets", targets);
  if (shape !== undefined && (typeof shape !== "object" || shape === null)) {
    throw new Error(`shape must be an object { batch?, seq }, got ${describe(shape)}`);
  }
  if (x.length === 0) throw new Error("inputs must not be empty (inputs.length is 0)");
  let batch = shape?.batch;
  let seq = shape?.seq;
  if (batch !== undefined) positiveInt("batch", batch);
  if (seq !== undefined) positiveInt("seq", seq);
  if (batch === undefined && seq === undefined) batch = 1;
  if (seq === undefined) {
    if (x.length % batch! !== 0) throw new Error(`inputs.length (${x.length}) is not a multiple of batch (${batch})`);
    seq = x.length / batch!;
  } else if (batch === undefined) {
    if (x.length % seq !== 0) throw new Error(`inputs.length (${x.length}) is not a multiple of seq (${seq})`);
    batch = x.length / seq;
  }
  if (x.length !== batch! * seq) {
    throw new Error(`inputs.length must be batch * seq = ${batch} * ${seq} = ${batch! * seq}, got ${x.length}`);
  }
  if (y.length !== x.length) {
    throw new Error(`targets.length must equal inputs.length (${x.length}), got ${y.length}`);
  }
  return { inputs: x, targets: y, batch: batch!, seq };
}

/** Checks generate()'s arguments and fills the defaults. */
export function checkGenerate(
  prompt: unknown,
  options: unknown,
): { prompt: Int32Array; maxTokens: number; temperature: number; seed: number } {
  const p = int32Array("prompt", prompt);
  if (typeof options !== "object" || options === null) {
    throw new Error(`options must be an object { maxTokens, temperature?, seed? }, got ${describe(options)}`);
  }
  const o = options as GenerateOptions;
  const maxTokens = positiveInt("options.maxTokens", o.maxTokens);
  let temperature = 1;
  if (o.temperature !== undefined) {
    if (typeof o.temperature !== "number" || !Number.isFinite(o.temperature) || o.temperature < 0) {
      throw new Error(`options.temperature must be a finite number >= 0 (0: greedy), got ${describe(o.temperature)}`);
    }
    temperature = o.temperature;
  }
  const seed =
    o.seed === undefined ? Math.floor(Math.random() * 0x7fffffff) : nonNegativeInt("options.seed", o.seed, 0xffffffff);
  return { prompt: p, maxTokens, temperature, seed };
}
