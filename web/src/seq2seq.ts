// Seq2Seq: the encoder-decoder Transformer of "Attention Is All You Need" in the core (qkv/seq2seq.h).

import { Model, callModel, createIn, loadIn } from "./model.js";
import type { Backend } from "./platform.js";
import type { ModelOut } from "./protocol.js";
import type {
  Metrics,
  Seq2SeqAttentionOptions,
  Seq2SeqConfig,
  Seq2SeqGenerateOptions,
  Seq2SeqShape,
  StepResult,
  CheckpointSource,
  LoadOptions,
} from "./types.js";
import {
  checkAttention,
  checkConfig,
  checkOptions,
  boolean,
  describe,
  finiteNumber,
  int32Array,
  integer,
  positiveInt,
  rows,
} from "./validate.js";

/** Checks a (src, tgtIn[, tgtOut]) batch: `src` is (batch, srcLen), the targets (batch, tgtLen). */
function checkPair(
  src: unknown,
  tgtIn: unknown,
  tgtOut: unknown,
  shape: Seq2SeqShape | undefined,
): { src: Int32Array; tgtIn: Int32Array; tgtOut: Int32Array; batch: number; srcLen: number; tgtLen: number } {
  const s = int32Array("src", src);
  const ti = int32Array("tgtIn", tgtIn);
  const to = tgtOut === undefined ? ti : int32Array("tgtOut", tgtOut);
  if (shape !== undefined) checkOptions("shape", shape, "{ batch? }", "shape");
  const { batch, seq: srcLen } = rows("src", s.length, { batch: shape?.batch ?? 1 }, 1, "srcLen");
  const { seq: tgtLen } = rows("tgtIn", ti.length, { batch }, 1, "tgtLen");
  if (to.length !== ti.length) throw new Error(`tgtOut.length must equal tgtIn.length (${ti.length}), got ${to.length}`);
  return { src: s, tgtIn: ti, tgtOut: to, batch, srcLen, tgtLen };
}

/** options.beamWidth checked here, so that the message names the option (the core's says beam_width). */
function beamWidth(v: unknown): number {
  const w = integer("options.beamWidth", v);
  if (w < 1 || w > 64) throw new Error(`options.beamWidth must be an integer from 1 to 64, got ${w}`);
  return w;
}

/** options.lengthPenalty: finite and >= 0 (the core's length_penalty). */
function lengthPenalty(v: unknown): number {
  const p = finiteNumber("options.lengthPenalty", v);
  if (p < 0) throw new Error(`options.lengthPenalty must be a finite number >= 0, got ${p}`);
  return p;
}

/**
 * An encoder-decoder Transformer (translation-style, as `torch.nn.Transformer` and the PyTorch translation
 * tutorial) living in the wasm core. The encoder reads `src`; the decoder is trained with teacher forcing:
 * `tgtIn` is the target shifted right (starting with bos), `tgtOut` the target itself (ending with eos).
 * Padding (`padId`) is masked in attention and ignored by the loss.
 */
export class Seq2Seq extends Model<Seq2SeqConfig> {
  private constructor(backend: Backend, out: ModelOut) {
    super("Seq2Seq", backend, out);
  }

  /** Builds a model with freshly initialised weights (loads the core first if {@link init} was not called). */
  static async create(config: Seq2SeqConfig): Promise<Seq2Seq> {
    const c = checkConfig(config, "{ srcVocab, tgtVocab, context, dModel, heads, encoderLayers, decoderLayers }");
    return new Seq2Seq(...(await createIn("Seq2Seq", c)));
  }

  /**
   * A model from a checkpoint written by {@link Seq2Seq.save}, by the native build or by `qkv train --model seq2seq`.
   * `source` and `options` as {@link LanguageModel.load}'s: bytes, a Response, a Blob or a ReadableStream,
   * streamed into the core with `onProgress` and cancellable with `signal`.
   */
  static async load(source: CheckpointSource, options?: LoadOptions): Promise<Seq2Seq> {
    return new Seq2Seq(...(await loadIn("Seq2Seq", source, options)));
  }

  /**
   * One optimisation step on `src` (batch, srcLen) and `tgtIn`, `tgtOut` (batch, tgtLen); the lengths are
   * derived from `batch` (default 1). Resolves to the mean loss over non-pad targets, before the update, and
   * whether the update was skipped for a non-finite loss or gradient (`nonFinite: "skip"`; see {@link StepResult}).
   */
  async trainStep(src: Int32Array, tgtIn: Int32Array, tgtOut: Int32Array, shape?: Seq2SeqShape): Promise<StepResult> {
    const b = checkPair(src, tgtIn, tgtOut, shape);
    return callModel(this, "trainStep", "trainStep", { batch: { kind: "Seq2Seq", ...b } });
  }

  /** Loss, token accuracy and perplexity over non-pad targets, without updating the weights (dropout off). */
  async evaluate(src: Int32Array, tgtIn: Int32Array, tgtOut: Int32Array, shape?: Seq2SeqShape): Promise<Metrics> {
    const b = checkPair(src, tgtIn, tgtOut, shape);
    return callModel(this, "evaluate", "evaluate", { batch: { kind: "Seq2Seq", ...b } });
  }

  /** The logits `(batch, tgtLen, tgtVocab)` of the decoder on `tgtIn` given `src`, row-major (dropout off). */
  async predict(src: Int32Array, tgtIn: Int32Array, shape?: Seq2SeqShape): Promise<Float32Array> {
    const { tgtOut: _, ...x } = checkPair(src, tgtIn, undefined, shape);
    return (await callModel(this, "predict", "predict", { inputs: { kind: "Seq2Seq", ...x } })).logits;
  }

  /**
   * Decodes each of the `batch` source rows from `bos` until `eos` or `maxTokens` tokens (below the context):
   * greedily, or with beam search (`beamWidth` > 1, see {@link Seq2SeqGenerateOptions}). Resolves to
   * `(batch, maxTokens)` ids, row-major: each row's best hypothesis, `eos` included and `padId` after it.
   * The encoder runs once; the decoder keeps KV caches unless `useCache` is false.
   */
  async generate(src: Int32Array, options: Seq2SeqGenerateOptions): Promise<Int32Array> {
    const s = int32Array("src", src);
    const o = checkOptions(
      "options",
      options,
      "{ maxTokens, bos, eos, batch?, beamWidth?, lengthPenalty?, useCache? }",
      "Seq2Seq.generate",
    );
    const maxTokens = positiveInt("options.maxTokens", o.maxTokens);
    const bos = integer("options.bos", o.bos);
    const eos = integer("options.eos", o.eos);
    if (o.batch !== undefined && (typeof o.batch !== "number" || !Number.isInteger(o.batch) || o.batch < 1)) {
      throw new (typeof o.batch === "number" ? Error : TypeError)(`options.batch must be a positive integer, got ${describe(o.batch)}`);
    }
    const { batch, seq: srcLen } = rows("src", s.length, { batch: (o.batch as number | undefined) ?? 1 }, 1, "srcLen");
    const decode = {
      bos,
      eos,
      maxTokens,
      beamWidth: o.beamWidth === undefined ? 1 : beamWidth(o.beamWidth),
      lengthPenalty: o.lengthPenalty === undefined ? 0.6 : lengthPenalty(o.lengthPenalty),
      useCache: o.useCache === undefined ? true : boolean("options.useCache", o.useCache),
    };
    return (await callModel(this, "generate", "seq2seqGenerate", { src: s, batch, srcLen, options: decode })).tokens;
  }

  /**
   * The attention weights of one head, row-major, from the last `trainStep`, `evaluate` or `predict` (row
   * `batchIndex` of its batch): `kind: "encoder"` (srcLen, srcLen), `"decoder"` (tgtLen, tgtLen) or `"cross"`
   * (tgtLen, srcLen). After `generate()` only the encoder's is available.
   */
  async attention(options: Seq2SeqAttentionOptions): Promise<Float32Array> {
    const { layer, head, batchIndex, kind } = checkAttention(options, true);
    if (kind !== "encoder" && kind !== "decoder" && kind !== "cross") {
      throw new (typeof kind === "string" ? Error : TypeError)(`options.kind must be "encoder", "decoder" or "cross", got ${describe(kind)}`);
    }
    return (await callModel(this, "attention", "attention", { layer, head, batchIndex, kind })).weights;
  }
}
