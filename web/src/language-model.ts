// LanguageModel: a decoder-only (GPT-style) Transformer in the core (qkv/language_model.h).

import { Model, callModel, createIn, loadIn } from "./model.js";
import type { Backend } from "./platform.js";
import type { ModelOut } from "./protocol.js";
import type { AttentionOptions, BatchShape, GenerateOptions, LanguageModelConfig, Metrics, StepResult } from "./types.js";
import { checkAttention, checkBatch, checkConfig, checkGenerate, int32Array, rows } from "./validate.js";

/**
 * A decoder-only (GPT-style) Transformer language model living in the wasm core.
 * Create it with {@link LanguageModel.create} or {@link LanguageModel.load}; free it with `dispose()`.
 * Batches are `(batch, seq)` token ids, row-major, in `Int32Array`s.
 */
export class LanguageModel extends Model<LanguageModelConfig> {
  private constructor(backend: Backend, out: ModelOut) {
    super("LanguageModel", backend, out);
  }

  /** Builds a model with freshly initialised weights (loads the core first if {@link init} was not called). */
  static async create(config: LanguageModelConfig): Promise<LanguageModel> {
    const c = checkConfig(config, "{ vocabSize, context, dModel, heads, layers }");
    return new LanguageModel(...(await createIn("LanguageModel", c)));
  }

  /**
   * A model from a checkpoint written by {@link LanguageModel.save}, by the native build or by the `qkv`
   * tool: its config, weights and (when saved) optimizer state. Rejects naming what is wrong with a
   * truncated, foreign or other-kind file.
   */
  static async load(bytes: Uint8Array | ArrayBuffer): Promise<LanguageModel> {
    return new LanguageModel(...(await loadIn("LanguageModel", bytes)));
  }

  /**
   * One optimisation step: forward, backward and an optimizer update on a batch laid out as `(batch, seq)`.
   * `targets[i]` is the token that should follow `inputs[i]`. Resolves to the loss before the update.
   */
  async trainStep(inputs: Int32Array, targets: Int32Array, shape?: BatchShape): Promise<StepResult> {
    const b = checkBatch(inputs, targets, shape);
    return callModel(this, "trainStep", "trainStep", { batch: { kind: "LanguageModel", ...b } });
  }

  /** Loss, next-token accuracy and perplexity on a batch, without updating the weights (dropout off). */
  async evaluate(inputs: Int32Array, targets: Int32Array, shape?: BatchShape): Promise<Metrics> {
    const b = checkBatch(inputs, targets, shape);
    return callModel(this, "evaluate", "evaluate", { batch: { kind: "LanguageModel", ...b } });
  }

  /** The logits `(batch, seq, vocabSize)` of a batch of inputs, row-major (dropout off). */
  async predict(inputs: Int32Array, shape?: BatchShape): Promise<Float32Array> {
    const x = int32Array("inputs", inputs);
    const { batch, seq } = rows("inputs", x.length, shape);
    const out = await callModel(this, "predict", "predict", { inputs: { kind: "LanguageModel", inputs: x, batch, seq } });
    return out.logits;
  }

  /**
   * Generates up to `maxTokens` new tokens after `prompt` and resolves to them (the prompt excluded): greedy
   * with `temperature: 0`, otherwise sampled with temperature, top-k, top-p and a repetition penalty, as
   * the core's `qkv::SamplingOptions`. The same seed and options give the same tokens. When the sequence
   * outgrows the context, the window slides.
   */
  async generate(prompt: Int32Array, options: GenerateOptions): Promise<Int32Array> {
    const g = checkGenerate(prompt, options);
    return (await callModel(this, "generate", "generate", g)).tokens;
  }

  /**
   * The attention weights `(seq, seq)` of one head, row-major (row i: how query position i attends to each
   * key), from the last `trainStep`, `evaluate` or `predict` (row `batchIndex` of its batch). After a
   * `generate()` run `predict()` on the sequence first.
   */
  async attention(options: AttentionOptions): Promise<Float32Array> {
    const { layer, head, batchIndex } = checkAttention(options);
    return (await callModel(this, "attention", "attention", { layer, head, batchIndex })).weights;
  }
}
