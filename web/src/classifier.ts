// Classifier: a Transformer encoder with a classification head in the core (qkv/classifier.h).

import { Model, callModel, createIn, loadIn } from "./model.js";
import type { Backend } from "./platform.js";
import type { ModelOut } from "./protocol.js";
import type { AttentionOptions, BatchShape, ClassifierConfig, Metrics, StepResult, CheckpointSource, LoadOptions } from "./types.js";
import { checkAttention, checkConfig, int32Array, int32Like, rows } from "./validate.js";

/** Checks (tokens, labels): tokens are (batch, seq) with batch = labels.length unless the shape says otherwise. */
function checkLabelled(
  tokens: unknown,
  labels: unknown,
  shape: BatchShape | undefined,
): { tokens: Int32Array; labels: Int32Array; batch: number; seq: number } {
  const t = int32Array("tokens", tokens);
  const l = int32Like("labels", labels);
  const { batch, seq } = rows("tokens", t.length, shape, l.length || 1);
  return { tokens: t, labels: l, batch, seq };
}

/**
 * A Transformer encoder with a classification head (the PyTorch text-classification tutorials) living in
 * the wasm core. The head reads the first ([CLS]) token or the mean over non-pad tokens (`pooling`).
 */
export class Classifier extends Model<ClassifierConfig> {
  private constructor(backend: Backend, out: ModelOut) {
    super("Classifier", backend, out);
  }

  /** Builds a model with freshly initialised weights (loads the core first if {@link init} was not called). */
  static async create(config: ClassifierConfig): Promise<Classifier> {
    const c = checkConfig(config, "{ vocabSize, context, dModel, heads, layers, classes }");
    return new Classifier(...(await createIn("Classifier", c)));
  }

  /**
   * A model from a checkpoint written by {@link Classifier.save}, by the native build or by `qkv train --model classifier`.
   * `source` and `options` as {@link LanguageModel.load}'s: bytes, a Response, a Blob or a ReadableStream,
   * streamed into the core with `onProgress` and cancellable with `signal`.
   */
  static async load(source: CheckpointSource, options?: LoadOptions): Promise<Classifier> {
    return new Classifier(...(await loadIn("Classifier", source, options)));
  }

  /**
   * One optimisation step on `tokens` (batch, seq), padded with `padId`, and one label per row in
   * `[0, classes)`; `batch` defaults to `labels.length`. Resolves to the mean loss before the update, and
   * whether the update was skipped for a non-finite loss or gradient (`nonFinite: "skip"`; see {@link StepResult}).
   */
  async trainStep(tokens: Int32Array, labels: Int32Array | readonly number[], shape?: BatchShape): Promise<StepResult> {
    const b = checkLabelled(tokens, labels, shape);
    return callModel(this, "trainStep", "trainStep", { batch: { kind: "Classifier", ...b } });
  }

  /** Loss, accuracy and perplexity over the rows, without updating the weights (dropout off). */
  async evaluate(tokens: Int32Array, labels: Int32Array | readonly number[], shape?: BatchShape): Promise<Metrics> {
    const b = checkLabelled(tokens, labels, shape);
    return callModel(this, "evaluate", "evaluate", { batch: { kind: "Classifier", ...b } });
  }

  /** The class logits `(batch, classes)` of `tokens` (batch, seq), row-major (dropout off). Batch defaults to 1. */
  async predict(tokens: Int32Array, shape?: BatchShape): Promise<Float32Array> {
    const t = int32Array("tokens", tokens);
    const { batch, seq } = rows("tokens", t.length, shape);
    return (await callModel(this, "predict", "predict", { inputs: { kind: "Classifier", tokens: t, batch, seq } })).logits;
  }

  /**
   * The attention weights `(seq, seq)` of one head of one encoder layer, row-major, from the last
   * `trainStep`, `evaluate` or `predict` (row `batchIndex` of its batch).
   */
  async attention(options: AttentionOptions): Promise<Float32Array> {
    const { layer, head, batchIndex } = checkAttention(options);
    return (await callModel(this, "attention", "attention", { layer, head, batchIndex })).weights;
  }
}
