// Trainer: the training loop a page or a Node script needs around a model: batches drawn from token arrays,
// progress callbacks, periodic evaluation and cancellation. Everything heavy stays in the core; this file
// only lays out batches (padding with the model's padId) and keeps time.

import { Classifier } from "./classifier.js";
import { LanguageModel } from "./language-model.js";
import { Seq2Seq } from "./seq2seq.js";
import type { Metrics, StepResult } from "./types.js";
import { abortSignal, checkOptions, describe, int32Array, integer, nonNegativeInt, object, positiveInt } from "./validate.js";

/** One translation-style example: the target holds bos first and eos last (the model learns tgt[1:] from tgt[:-1]). */
export interface Seq2SeqExample {
  src: Int32Array;
  tgt: Int32Array;
}

/** One labelled sequence. */
export interface ClassifierExample {
  tokens: Int32Array;
  /** The class, in `[0, classes)`. */
  label: number;
}

/**
 * What a {@link Trainer} trains on. `D` is the data's form: one `Int32Array` of token ids for a
 * LanguageModel, an array of examples for a Seq2Seq or a Classifier.
 */
export interface TrainerOptions<D> {
  /** The training data. */
  data: D;
  /** Held-out data for evaluation (same form). */
  evalData?: D;
  /** Rows per batch. */
  batchSize: number;
  /** LanguageModel only: tokens per window. Default: the model's context. */
  seqLen?: number;
  /** Seed of the batch sampling (the same seed draws the same batches). Default 1. */
  seed?: number;
}

/** Progress after each step. */
export interface StepProgress {
  /** Steps taken by this trainer so far, this one included (1-based; continues across `fit` calls). */
  step: number;
  /** The step's loss (before its update). */
  loss: number;
  /** Whether the model skipped this step's update (a non-finite loss or gradient under `nonFinite: "skip"`). */
  skipped: boolean;
  /** Steps the model has skipped so far (see {@link StepResult.skippedSteps}). */
  skippedSteps: number;
  /**
   * Tokens per second over this `fit` call so far, counting the steps' time only: the batch's tokens
   * (LanguageModel: batch × seq; Seq2Seq: source and target tokens; Classifier: tokens; padding excluded).
   */
  tokensPerSecond: number;
}

/** An evaluation over the evaluation data. */
export interface EvalProgress extends Metrics {
  /** The step after which it ran. */
  step: number;
}

/** Options of {@link Trainer.fit}. */
export interface FitOptions {
  /** Number of steps to take. */
  steps: number;
  /** With `evalData`: evaluate every this many steps, and after the last step. Default: after the last step only. */
  evalEvery?: number;
  /** Evaluate on at most this many batches of `evalData` (in order, always the same). Default: all of it. */
  evalBatches?: number;
  /**
   * Stops between steps when aborted: `fit` rejects with the signal's reason (an `AbortError`). The step in
   * flight completes, so the model is consistent and can go on training or be saved.
   */
  signal?: AbortSignal;
  /** Called after every step (awaited when it returns a promise). */
  onStep?: (progress: StepProgress) => void | Promise<void>;
  /** Called after every evaluation (awaited when it returns a promise). */
  onEval?: (progress: EvalProgress) => void | Promise<void>;
}

/** What {@link Trainer.fit} resolves to. */
export interface FitResult {
  /** Steps taken by this trainer so far (across `fit` calls). */
  step: number;
  /** The last step's loss. */
  loss: number;
  /** The evaluations of this call, in order. */
  evals: EvalProgress[];
}

/** A batch ready for the model: how to train and evaluate on it, and how many tokens it holds. */
interface Batch {
  train(): Promise<StepResult>;
  evaluate(): Promise<Metrics>;
  tokens: number;
}

/** Where batches come from: a random one to train on, and the fixed evaluation batches. */
interface Source {
  next(): Batch;
  evaluation(maxBatches: number): Batch[];
}

/** Deterministic PRNG (mulberry32): batches are a function of the seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Indices 0..n-1 in epochs of seeded shuffles: every example once per epoch. */
function epochs(n: number, random: () => number): () => number {
  let order: number[] = [];
  return () => {
    if (order.length === 0) {
      order = Array.from({ length: n }, (_, i) => i);
      for (let i = n - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [order[i], order[j]] = [order[j]!, order[i]!];
      }
    }
    return order.pop()!;
  };
}

function chunks<T>(items: readonly T[], size: number, max: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length && out.length < max; i += size) out.push(items.slice(i, i + size));
  return out;
}

function lmSource(model: LanguageModel, name: string, data: unknown, batch: number, seq: number, random: () => number): Source {
  const d = int32Array(name, data);
  if (d.length < seq + 1) {
    throw new Error(`${name} has ${d.length} tokens: expected at least seqLen + 1 = ${seq + 1}`);
  }
  const make = (starts: number[]): Batch => {
    const inputs = new Int32Array(starts.length * seq);
    const targets = new Int32Array(starts.length * seq);
    starts.forEach((s, b) => {
      inputs.set(d.subarray(s, s + seq), b * seq);
      targets.set(d.subarray(s + 1, s + seq + 1), b * seq);
    });
    const shape = { batch: starts.length, seq };
    return {
      train: () => model.trainStep(inputs, targets, shape),
      evaluate: () => model.evaluate(inputs, targets, shape),
      tokens: inputs.length,
    };
  };
  return {
    next: () => make(Array.from({ length: batch }, () => Math.floor(random() * (d.length - seq)))),
    // Consecutive windows from the start, without overlap.
    evaluation: (max) => {
      const starts = Array.from({ length: Math.floor((d.length - 1) / seq) }, (_, i) => i * seq);
      return chunks(starts, batch, max).map(make);
    },
  };
}

function seq2seqSource(model: Seq2Seq, name: string, data: unknown, batch: number, random: () => number): Source {
  if (!Array.isArray(data) || data.length === 0) {
    throw new TypeError(`${name} must be a non-empty array of { src, tgt } examples, got ${describe(data)}`);
  }
  const examples = data.map((e: unknown, i) => {
    const o = object(`${name}[${i}]`, e, "{ src: Int32Array, tgt: Int32Array }");
    const src = int32Array(`${name}[${i}].src`, o.src);
    const tgt = int32Array(`${name}[${i}].tgt`, o.tgt);
    if (src.length < 1) throw new Error(`${name}[${i}].src is empty: expected at least one token`);
    if (tgt.length < 2) throw new Error(`${name}[${i}].tgt has ${tgt.length} tokens: expected bos, ..., eos (at least 2)`);
    return { src, tgt };
  });
  const pad = model.config.padId;
  const make = (rows: Seq2SeqExample[]): Batch => {
    const srcLen = Math.max(...rows.map((r) => r.src.length));
    const tgtLen = Math.max(...rows.map((r) => r.tgt.length - 1));
    const src = new Int32Array(rows.length * srcLen).fill(pad);
    const tgtIn = new Int32Array(rows.length * tgtLen).fill(pad);
    const tgtOut = new Int32Array(rows.length * tgtLen).fill(pad);
    let tokens = 0;
    rows.forEach((r, b) => {
      src.set(r.src, b * srcLen);
      tgtIn.set(r.tgt.subarray(0, -1), b * tgtLen);
      tgtOut.set(r.tgt.subarray(1), b * tgtLen);
      tokens += r.src.length + r.tgt.length - 1;
    });
    const shape = { batch: rows.length };
    return {
      train: () => model.trainStep(src, tgtIn, tgtOut, shape),
      evaluate: () => model.evaluate(src, tgtIn, tgtOut, shape),
      tokens,
    };
  };
  const pick = epochs(examples.length, random);
  return {
    next: () => make(Array.from({ length: Math.min(batch, examples.length) }, () => examples[pick()]!)),
    evaluation: (max) => chunks(examples, batch, max).map(make),
  };
}

function classifierSource(model: Classifier, name: string, data: unknown, batch: number, random: () => number): Source {
  if (!Array.isArray(data) || data.length === 0) {
    throw new TypeError(`${name} must be a non-empty array of { tokens, label } examples, got ${describe(data)}`);
  }
  const examples = data.map((e: unknown, i) => {
    const o = object(`${name}[${i}]`, e, "{ tokens: Int32Array, label: number }");
    const tokens = int32Array(`${name}[${i}].tokens`, o.tokens);
    if (tokens.length < 1) throw new Error(`${name}[${i}].tokens is empty: expected at least one token`);
    // Checked here, each example by its index, rather than by the core inside a shuffled batch (or, for evalData,
    // only at the first evaluation, after every step).
    const { vocabSize, context, classes } = model.config;
    if (tokens.length > context) {
      throw new Error(`${name}[${i}].tokens has ${tokens.length} tokens: expected at most the model's context, ${context}`);
    }
    const bad = tokens.findIndex((t) => t < 0 || t >= vocabSize);
    if (bad >= 0) throw new Error(`${name}[${i}].tokens[${bad}] = ${tokens[bad]} is out of range: expected a token id in [0, ${vocabSize})`);
    const label = integer(`${name}[${i}].label`, o.label);
    if (label < 0 || label >= classes) {
      throw new Error(`${name}[${i}].label = ${label} is out of range: expected a class in [0, ${classes})`);
    }
    return { tokens, label };
  });
  const pad = model.config.padId;
  const make = (rows: ClassifierExample[]): Batch => {
    const seq = Math.max(...rows.map((r) => r.tokens.length));
    const tokens = new Int32Array(rows.length * seq).fill(pad);
    rows.forEach((r, b) => tokens.set(r.tokens, b * seq));
    const labels = Int32Array.from(rows, (r) => r.label);
    const shape = { batch: rows.length, seq };
    return {
      train: () => model.trainStep(tokens, labels, shape),
      evaluate: () => model.evaluate(tokens, labels, shape),
      tokens: rows.reduce((n, r) => n + r.tokens.length, 0),
    };
  };
  const pick = epochs(examples.length, random);
  return {
    next: () => make(Array.from({ length: Math.min(batch, examples.length) }, () => examples[pick()]!)),
    evaluation: (max) => chunks(examples, batch, max).map(make),
  };
}

/** The error `fit` rejects with when its signal is aborted. */
function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason;
  const e = new Error(reason === undefined ? "the training was aborted" : `the training was aborted: ${String(reason)}`);
  e.name = "AbortError";
  return e;
}

/**
 * Trains a model on token arrays: a LanguageModel on random windows of one `Int32Array`, a Seq2Seq or a
 * Classifier on random batches of examples (every example once per epoch), padded per batch with the
 * model's `padId`. Reports progress after every step, evaluates on `evalData` every N steps, and stops
 * between steps when an `AbortSignal` fires. The trainer does not own the model: dispose it yourself.
 *
 * ```ts
 * const trainer = new Trainer(lm, { data: ids, evalData: heldOut, batchSize: 12, seqLen: 64 });
 * await trainer.fit({ steps: 2000, evalEvery: 200, signal, onStep: ({ step, loss }) => plot(step, loss) });
 * ```
 */
export class Trainer {
  /** The model being trained. */
  readonly model: LanguageModel | Seq2Seq | Classifier;
  #step = 0;
  readonly #train: Source;
  readonly #eval: Source | undefined;

  /** A trainer for a decoder-only language model: `data` is one long array of token ids. */
  constructor(model: LanguageModel, options: TrainerOptions<Int32Array>);
  /** A trainer for an encoder-decoder: `data` is an array of `{ src, tgt }` examples. */
  constructor(model: Seq2Seq, options: TrainerOptions<readonly Seq2SeqExample[]>);
  /** A trainer for a classifier: `data` is an array of `{ tokens, label }` examples. */
  constructor(model: Classifier, options: TrainerOptions<readonly ClassifierExample[]>);
  constructor(
    model: LanguageModel | Seq2Seq | Classifier,
    options: TrainerOptions<Int32Array | readonly Seq2SeqExample[] | readonly ClassifierExample[]>,
  ) {
    const o = checkOptions("options", options, "{ data, evalData?, batchSize, seqLen?, seed? }", "Trainer");
    const batch = positiveInt("options.batchSize", o.batchSize);
    const random = rng(o.seed === undefined ? 1 : nonNegativeInt("options.seed", o.seed, 0xffffffff));
    const source = (name: string, data: unknown): Source => {
      if (model instanceof LanguageModel) {
        const seq = o.seqLen === undefined ? model.config.context : positiveInt("options.seqLen", o.seqLen);
        return lmSource(model, name, data, batch, seq, random);
      }
      if (o.seqLen !== undefined) throw new TypeError("options.seqLen is for a LanguageModel only (examples set their own lengths)");
      if (model instanceof Seq2Seq) return seq2seqSource(model, name, data, batch, random);
      if (model instanceof Classifier) return classifierSource(model, name, data, batch, random);
      throw new TypeError(`model must be a LanguageModel, Seq2Seq or Classifier, got ${describe(model)}`);
    };
    this.model = model;
    this.#train = source("options.data", o.data);
    this.#eval = o.evalData === undefined ? undefined : source("options.evalData", o.evalData);
  }

  /** Steps taken so far (across `fit` calls). */
  get step(): number {
    return this.#step;
  }

  /**
   * Evaluates on `evalData` (at most `maxBatches` batches, always the same ones): the loss, accuracy and
   * perplexity over every counted position, as if it were one batch.
   */
  async evaluate(maxBatches = Infinity): Promise<Metrics> {
    return this.#evaluate(maxBatches);
  }

  // evaluate(), and fit's evaluations, which an abort stops between batches.
  async #evaluate(maxBatches: number, signal?: AbortSignal): Promise<Metrics> {
    if (!this.#eval) throw new Error("evaluate() needs options.evalData, given to the Trainer");
    if (maxBatches !== Infinity) positiveInt("maxBatches", maxBatches);
    let loss = 0;
    let correct = 0;
    let count = 0;
    for (const b of this.#eval.evaluation(maxBatches)) {
      if (signal?.aborted) throw abortError(signal);
      const m = await b.evaluate();
      loss += m.loss * m.count;
      correct += m.accuracy * m.count;
      count += m.count;
    }
    const mean = count > 0 ? loss / count : Number.NaN;
    return { loss: mean, accuracy: count > 0 ? correct / count : Number.NaN, perplexity: Math.exp(mean), count };
  }

  /**
   * Takes `steps` training steps, calling `onStep` after each and evaluating every `evalEvery` steps (and
   * after the last) when the trainer has `evalData`. Rejects with the signal's `AbortError` when aborted
   * (between steps, and between an evaluation's batches), or with the error of a failed step; the model stays usable
   * either way.
   */
  async fit(options: FitOptions): Promise<FitResult> {
    const o = checkOptions("options", options, "{ steps, evalEvery?, evalBatches?, signal?, onStep?, onEval? }", "fit");
    const steps = positiveInt("options.steps", o.steps);
    const evalEvery = o.evalEvery === undefined ? steps : positiveInt("options.evalEvery", o.evalEvery);
    const evalBatches = o.evalBatches === undefined ? Infinity : positiveInt("options.evalBatches", o.evalBatches);
    const signal = abortSignal("options.signal", o.signal);
    for (const k of ["onStep", "onEval"] as const) {
      if (o[k] !== undefined && typeof o[k] !== "function") throw new TypeError(`options.${k} must be a function, got ${describe(o[k])}`);
    }
    const onStep = o.onStep as FitOptions["onStep"];
    const onEval = o.onEval as FitOptions["onEval"];
    const evals: EvalProgress[] = [];
    let tokens = 0;
    let seconds = 0;
    let loss = Number.NaN;
    for (let i = 1; i <= steps; i++) {
      if (signal?.aborted) throw abortError(signal);
      const batch = this.#train.next();
      const t0 = performance.now();
      const result = await batch.train();
      loss = result.loss;
      seconds += (performance.now() - t0) / 1000;
      tokens += batch.tokens;
      this.#step++;
      const { skipped, skippedSteps } = result;
      await onStep?.({ step: this.#step, loss, skipped, skippedSteps, tokensPerSecond: seconds > 0 ? tokens / seconds : 0 });
      if (this.#eval && (i % evalEvery === 0 || i === steps)) {
        const e = { step: this.#step, ...(await this.#evaluate(evalBatches, signal)) };
        evals.push(e);
        await onEval?.(e);
      }
    }
    return { step: this.#step, loss, evals };
  }
}
