// LanguageModel: a decoder-only (GPT-style) Transformer in the core (qkv/language_model.h).

import { abortError } from "./load-stream.js";
import { Model, callModel, createIn, importIn, loadIn, pretrainedIn, pretrainedOptions, streamModel } from "./model.js";
import type { Backend, TokenStream } from "./platform.js";
import { eosTokens, notGpt2, readPretrained } from "./pretrained.js";
import type { ModelOut, SamplingIn } from "./protocol.js";
import { tokenizerJSON, type AnyTokenizer } from "./tokenizer.js";
import type {
  AttentionOptions,
  BatchShape,
  CheckpointSource,
  GenerateOptions,
  LanguageModelConfig,
  LoadOptions,
  Metrics,
  PretrainedOptions,
  PretrainedSource,
  StepResult,
} from "./types.js";
import {
  checkAttention,
  checkBatch,
  checkConfig,
  checkGenerate,
  describe,
  int32Array,
  rows,
  text as wellFormed,
} from "./validate.js";

/**
 * A decoder-only (GPT-style) Transformer language model living in the wasm core.
 * Create it with {@link LanguageModel.create} or {@link LanguageModel.load}; free it with `dispose()`.
 * Batches are `(batch, seq)` token ids, row-major, in `Int32Array`s.
 */
export class LanguageModel extends Model<LanguageModelConfig> {
  /**
   * The tokenizer a text prompt goes through: `generate("text", ...)` and `stream("text", ...)` encode the prompt
   * with it and decode what the model writes. {@link LanguageModel.fromPretrained} sets it from the folder's
   * tokenizer files (undefined when the folder has none); set it yourself for any other model, e.g.
   * `lm.tokenizer = await Tokenizer.fromCheckpoint(bytes)`.
   */
  tokenizer: AnyTokenizer | undefined = undefined;

  /**
   * The token ids `generate` and `stream` stop after when their options give no `stopTokens` (which then win,
   * `[]` included). {@link LanguageModel.fromPretrained} sets them as Hugging Face's `generate` stops: the folder's
   * `eos_token_id` (config.json), else its tokenizer's end-of-text token (GPT-2's `<|endoftext|>`); empty
   * otherwise. Set them yourself for any other model.
   */
  stopTokens: Int32Array = new Int32Array(0);

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
   *
   * `source` may be the file's bytes, a `fetch` Response, a `File`/`Blob` or a `ReadableStream`: anything but
   * bytes (or bytes with options) streams into the core piece by piece, each written straight into the model's
   * parameters, so the whole file is never held twice. `options.onProgress` reports `{ loaded, total }` after
   * each piece; `options.signal` cancels (the load rejects with the signal's reason and the core stays usable).
   */
  static async load(source: CheckpointSource, options?: LoadOptions): Promise<LanguageModel> {
    return new LanguageModel(...(await loadIn("LanguageModel", source, options)));
  }

  /**
   * A GPT-2-family model as the Hugging Face Hub serves it: its `config.json` (the text, or the parsed object)
   * and its `model.safetensors` (GPT2Model or GPT2LMHeadModel names, F32, F16 or BF16). `config.json` decides the
   * architecture: a `model_type` other than `"gpt2"` rejects naming it, and every tensor missing from the
   * weights or of the wrong shape is named. The model generates and fine-tunes like any other (dropout 0).
   */
  static async importPretrained(
    config: string | Readonly<Record<string, unknown>>,
    weights: Uint8Array | ArrayBuffer,
  ): Promise<LanguageModel> {
    return new LanguageModel(...(await importIn(config, weights)));
  }

  /**
   * A GPT-2-family model as the Hugging Face Hub serves it, with its tokenizer as {@link LanguageModel.tokenizer}:
   *
   * ```ts
   * using lm = await LanguageModel.fromPretrained("https://huggingface.co/gpt2/resolve/main/", {
   *   onProgress: ({ file, loaded, total }) => console.log(file, loaded, total),
   *   signal: controller.signal,
   * });
   * const text = await lm.generate("The meaning of life is", { maxTokens: 40, temperature: 0 });
   * ```
   *
   * `source` is the folder's URL, the files a user picked or dropped (a `FileList` or an array of `File`s), or a
   * record of file name to contents (see {@link PretrainedSource}). It reads `config.json`, then the tokenizer
   * (`tokenizer.json`, else `vocab.json` + `merges.txt`, else none: `tokenizer` is then undefined), then streams
   * `model.safetensors` into the core as it arrives, each tensor written straight into its parameter (converted
   * from F16 / BF16, GPT-2's Conv1D weights transposed on the way): the file is never held whole, in JS or in the
   * wasm heap, so loading takes about the model's float32 weights. Sharded weights (`model.safetensors.index.json`
   * and the shards it names) stream the same way, one shard after another, once every shard's header has been
   * read (the core checks every tensor against them first). The model is the one
   * {@link LanguageModel.importPretrained} builds from the same bytes.
   * `options.onProgress` reports `{ file, loaded, total }` as each file's bytes arrive; `options.signal` cancels
   * (the call rejects with the signal's reason; the download stops and nothing stays in the core).
   * `options.weights: "keep"` keeps the F16 / BF16 matrices of a half-precision file in that format: half the
   * memory, the model `"f32"` + `quantize({ weights: "f16" | "bf16" })` gives, for inference (see
   * {@link PretrainedOptions.weights}).
   *
   * Rejects with an `Error` for an HTTP failure (its status and URL), a missing file (named, with where it was
   * looked for; a shard the index names, before any weights are read), a `config.json` of another architecture (the core's message names its `model_type`; before the
   * weights are downloaded), a folder with only `pytorch_model.bin` (with the line that converts it), and weights
   * too big for the wasm core (the bytes needed against the 4 GiB available, checked before anything is allocated:
   * the float32 weights config.json's shapes give, or with `weights: "keep"` the weights as they will be held, the
   * file's F16 / BF16 matrices in half precision, read from its header); the core's own refusals (a missing or mis-shaped tensor, a truncated file) as the
   * weights stream in.
   */
  static async fromPretrained(source: PretrainedSource, options: PretrainedOptions = {}): Promise<LanguageModel> {
    const o = pretrainedOptions(options);
    const files = await readPretrained(source, o, async (config) => {
      // Another architecture: the core refuses its config.json (naming model_type) before a download of
      // weights it could not use. The empty weights are never reached for a config it refuses.
      if (notGpt2(config)) new LanguageModel(...(await importIn(config, EMPTY_SAFETENSORS))).dispose();
    });
    const m = new LanguageModel(...(await pretrainedIn(files.config, files.weights, o)));
    if (o.signal?.aborted) {
      m.dispose();
      throw abortError(o.signal);
    }
    m.tokenizer = files.tokenizer;
    m.stopTokens = eosTokens(files.config, files.tokenizer?.eosId);
    return m;
  }

  /**
   * One optimisation step: forward, backward and an optimizer update on a batch laid out as `(batch, seq)`.
   * `targets[i]` is the token that should follow `inputs[i]`. Resolves to the loss before the update, and
   * whether the update was skipped for a non-finite loss or gradient (`nonFinite: "skip"`; see {@link StepResult}).
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
   * outgrows the context, the window slides: every position then moves (learned positions), so each token past
   * the context re-runs the whole window, a prefill's cost rather than one position's (GPT-2: 1024 positions a
   * token). Keep prompt + `maxTokens` within the context for the KV cache's speed. With `onToken`, each token is
   * also handed over as soon as it is made (see {@link GenerateOptions.onToken} and {@link LanguageModel.stream}).
   *
   * A string prompt needs {@link LanguageModel.tokenizer}: the prompt is encoded with it, and the call resolves
   * to the new text, `tokenizer.decode(tokens)` of the same tokens (special tokens dropped; `onToken` still
   * gets ids). Without a tokenizer a string prompt rejects with a TypeError saying so.
   */
  generate(prompt: Int32Array, options: GenerateOptions): Promise<Int32Array>;
  generate(prompt: string, options: GenerateOptions): Promise<string>;
  async generate(prompt: Int32Array | string, options: GenerateOptions): Promise<Int32Array | string> {
    if (typeof prompt === "string") {
      const tok = this.#textTokenizer("generate");
      return tok.decode(await this.generate(await tok.encode(wellFormed("prompt", prompt)), options));
    }
    const { onToken, signal, ...g } = checkGenerate(prompt, options, this.stopTokens);
    if (!onToken && !signal) return (await callModel(this, "generate", "generate", g)).tokens;
    return generating(this, "generate", g, onToken ?? (() => undefined), signal).result;
  }

  /**
   * The tokens {@link LanguageModel.generate} makes with the same prompt and options, each yielded as soon as
   * the core has made it (in a browser the core runs in a Worker, so the page stays responsive):
   *
   * ```ts
   * for await (const token of lm.stream(promptIds, { maxTokens: 200, temperature: 0.8, seed: 1 })) {
   *   ids.push(token);
   *   if (stopClicked) break; // ends generation in the core; the model is ready for the next call
   * }
   * // With a tokenizer, stream text instead (a string prompt, below): a token decoded alone can be part of a
   * // character (byte-level BPE), which the text stream holds back until it is whole.
   * for await (const piece of lm.stream("Once upon a time", { maxTokens: 200 })) output.textContent += piece;
   * ```
   *
   * Generation runs ahead of a slow loop (the tokens wait for it) and ends in the core as soon as the loop
   * ends early (`break`, `return`, or a throw); a bad argument rejects the first step of the loop. Like one
   * `generate()` call, a stream holds its model until it ends: a call on this model made meanwhile (even
   * inside the loop) waits for the last token, so nothing changes the stream's tokens; other models' calls
   * run at once. `dispose()` does not wait: it ends the stream, whose loop then throws.
   *
   * A string prompt (with {@link LanguageModel.tokenizer}) yields text instead: each piece as soon as its
   * tokens decode to whole characters (a byte-level BPE token can end inside one), the pieces together the
   * text `generate` resolves to with the same prompt and options.
   */
  stream(prompt: Int32Array, options: GenerateOptions): AsyncGenerator<number, void, undefined>;
  stream(prompt: string, options: GenerateOptions): AsyncGenerator<string, void, undefined>;
  stream(prompt: Int32Array | string, options: GenerateOptions): AsyncGenerator<number | string, void, undefined> {
    return typeof prompt === "string" ? this.#streamText(prompt, options) : this.#streamIds(prompt, options);
  }

  /**
   * The new text as it is made. Each step decodes all the tokens so far, since only the whole sequence's text
   * is defined (a word tokenizer's spacing, UTF-8 split across tokens), and yields what it adds; a text that
   * ends in U+FFFD may be a character cut short, so it waits for the next token (or the end).
   */
  async *#streamText(prompt: string, options: GenerateOptions): AsyncGenerator<string, void, undefined> {
    const tok = this.#textTokenizer("stream");
    const made: number[] = [];
    let shown = "";
    const added = (text: string): string => {
      if (!text.startsWith(shown)) {
        throw new Error("qkv: a longer sequence decoded to text that does not extend the shorter one's; please report this");
      }
      const piece = text.slice(shown.length);
      shown = text;
      return piece;
    };
    for await (const token of this.#streamIds(await tok.encode(wellFormed("prompt", prompt)), options)) {
      made.push(token);
      const text = await tok.decode(made);
      if (text.endsWith("\uFFFD")) continue;
      const piece = added(text);
      if (piece) yield piece;
    }
    const piece = added(await tok.decode(made));
    if (piece) yield piece;
  }

  /** The tokenizer for a text prompt, or a TypeError saying there is none. */
  #textTokenizer(method: string): AnyTokenizer {
    if (this.tokenizer === undefined) {
      throw new TypeError(
        `prompt must be an Int32Array of token ids, got a string: LanguageModel.${method}() takes text only from a ` +
          "model with a tokenizer to encode it, and this one has none; set model.tokenizer " +
          "(LanguageModel.fromPretrained sets it from the folder's tokenizer.json or vocab.json + merges.txt)",
      );
    }
    if (tokenizerJSON(this.tokenizer) === undefined) {
      throw new TypeError(
        "model.tokenizer must be a tokenizer of this package (Tokenizer.fromJSON, BpeTokenizer.train, " +
          `CharTokenizer.fromText, ...), got ${describe(this.tokenizer)}`,
      );
    }
    return this.tokenizer;
  }

  async *#streamIds(prompt: Int32Array, options: GenerateOptions): AsyncGenerator<number, void, undefined> {
    const { onToken, signal, ...g } = checkGenerate(prompt, options, this.stopTokens);
    const ready: number[] = [];
    let wake: (() => void) | undefined;
    let ended = false;
    const s = generating(
      this,
      "stream",
      g,
      (token, index) => {
        onToken?.(token, index);
        ready.push(token);
        wake?.();
      },
      signal,
    );
    const result = s.result.finally(() => {
      ended = true;
      wake?.();
    });
    result.catch(() => undefined); // rethrown to the loop below; a loop abandoned without return() must not crash Node
    try {
      for (let next = 0; ; ) {
        if (next < ready.length) {
          yield ready[next++]!;
        } else if (ended) {
          await result; // throws what failed
          return;
        } else {
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      }
    } finally {
      // The loop ended early: stop the core, and wait until it has, so that the next call finds it idle.
      s.stop();
      await result.catch(() => undefined);
    }
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

/** A safetensors file with no tensors: 8-byte little-endian header length 2, then the header `{}`. */
const EMPTY_SAFETENSORS = Uint8Array.of(2, 0, 0, 0, 0, 0, 0, 0, 0x7b, 0x7d);

/**
 * Starts generating token by token, handing each token and its index to `each` until stop() or until `each`
 * throws: then generation stops in the core, and after a throw `result` rejects with what was thrown. An abort of
 * `signal` stops it the same way, `result` rejecting with the signal's reason (already aborted: nothing starts).
 */
function generating(
  m: LanguageModel,
  method: string,
  input: { prompt: Int32Array; options: SamplingIn },
  each: (token: number, index: number) => void,
  signal?: AbortSignal,
): TokenStream {
  if (signal?.aborted) return { result: Promise.reject(abortError(signal)), stop: () => undefined };
  let thrown: { error: unknown } | undefined;
  let stopped = false;
  let index = 0;
  const stop = (): void => {
    stopped = true;
    s.stop();
  };
  // The backend never calls back synchronously inside stream(), so `s` is set by the first token.
  const s: TokenStream = streamModel(m, method, input, (token) => {
    if (stopped) return; // tokens already on their way from the Worker when it stopped
    try {
      each(token, index++);
    } catch (error) {
      thrown = { error };
      stop();
    }
  });
  const abort = (): void => {
    thrown ??= { error: abortError(signal!) };
    stop();
  };
  signal?.addEventListener("abort", abort, { once: true });
  return {
    result: s.result.then(
      (tokens) => {
        signal?.removeEventListener("abort", abort);
        if (thrown) throw thrown.error;
        return tokens;
      },
      (error: unknown) => {
        signal?.removeEventListener("abort", abort);
        throw error;
      },
    ),
    stop,
  };
}
