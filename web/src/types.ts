// Public types of the qkv package, shared by the Node and browser entries.


/** Options for {@link init}. Every field is optional. */
export interface InitOptions {
  /**
   * Number of threads the core uses (the size of the wasm pthread pool). Defaults to the number of
   * logical cores (`navigator.hardwareConcurrency` / `os.availableParallelism()`), capped at 8.
   * Ignored (1 is used) when the single-threaded build is loaded.
   */
  threads?: number;
  /**
   * Where the build files live (`qkv.js`, `qkv.wasm`, `qkv-relaxed.wasm`, `qkv.worker.js`, `qkv-st.js`,
   * `qkv-st.wasm`, `qkv-st-relaxed.wasm`):
   * a URL of their folder in the browser (e.g. a CDN), a folder path or `file:` URL in Node.
   * Defaults to the `wasm/` folder shipped beside this package's JavaScript.
   */
  wasmPath?: string | URL;
  /**
   * `true` demands the threaded build (rejects when the page is not cross-origin isolated),
   * `false` forces the single-threaded build. Default: threaded where the environment allows it.
   */
  threaded?: boolean;
  /**
   * `true` demands the relaxed-SIMD build (rejects where the engine lacks relaxed SIMD), `false` forces the
   * plain SIMD128 build. Default: relaxed where the engine has it (Chromium 114+ and Node 22+, for instance).
   * The relaxed build's matrix products use `f32x4.relaxed_madd`, a fused multiply-add on CPUs with FMA (as
   * the native builds are) and a multiply and an add elsewhere, so its last bits can differ between machines;
   * the plain build gives the same bits on every machine.
   */
  relaxedSimd?: boolean;
  /**
   * Where models train and run: `"webgpu"` on the page's GPU (rejects where there is none, naming why),
   * `"wasm"` on the CPU cores, `"auto"` WebGPU where a hardware adapter exists, else the wasm core with one
   * console warning saying why. Unset, the same choice as `"auto"` without the warning (the reason is in
   * `info().fallbackReason`). WebGPU needs a browser with `navigator.gpu` and the threaded build (a
   * cross-origin isolated page: the core waits for the GPU on shared memory); in Node it is never used.
   * Checkpoints are the same bytes either way: `save()` reads the weights back from the GPU.
   */
  backend?: "webgpu" | "wasm" | "auto";
}

/** What runs, as reported by {@link init}. */
export interface RuntimeInfo {
  /** Whether the threaded (pthreads + SharedArrayBuffer) build is running. */
  threaded: boolean;
  /** Number of threads the core uses (1 for the single-threaded build). */
  threads: number;
  /** SIMD instruction set of the core's kernels, e.g. `"sse4.1"` (WebAssembly SIMD128). */
  simd: string;
  /** Whether the relaxed-SIMD build runs (its matrix products use fused multiply-adds): see {@link InitOptions.relaxedSimd}. */
  relaxedSimd: boolean;
  /** Version reported by the loaded core (equal to the package version). */
  version: string;
  /** Where models train and run: the page's GPU through WebGPU, or the wasm core on the CPU. */
  backend: "webgpu" | "wasm";
  /** The WebGPU adapter in use (`"google swiftshader"`, `"nvidia ampere"`, ...), with backend `"webgpu"`. */
  adapter?: string;
  /** Why `init({ backend: "auto" })` fell back to the wasm core. */
  fallbackReason?: string;
}

/** The three model kinds of the core. */
export type ModelKind = "LanguageModel" | "Seq2Seq" | "Classifier";

/**
 * Optimizer, learning-rate schedule and gradient clipping: the same fields for every model, given flat in
 * its config. Every field is optional; the defaults are the core's (`qkv/optimizer.h`).
 */
export interface OptimizerOptions {
  /** `"adamw"` (decoupled weight decay, the default) or `"adam"` (L2 penalty in the gradient). */
  optimizer?: "adam" | "adamw";
  /** Peak learning rate. Default 1e-3. */
  lr?: number;
  /** Adam beta1. Default 0.9. */
  beta1?: number;
  /** Adam beta2. Default 0.99. */
  beta2?: number;
  /** Adam epsilon. Default 1e-8. */
  eps?: number;
  /** Weight decay. Default 0.1. */
  weightDecay?: number;
  /** Decay only tensors with 2+ dimensions (matrices, as nanoGPT). Default true. */
  decayMatricesOnly?: boolean;
  /** Clip the global gradient norm to this value before each update (0: no clipping). Default 1. */
  gradClip?: number;
  /**
   * `"constant"` (after an optional linear warm-up; the default), `"inverse_sqrt"` (the paper's warm-up and
   * inverse square root decay; needs `warmupSteps >= 1`) or `"cosine"` (warm-up, then cosine decay from `lr`
   * to `minLr` at `totalSteps`).
   */
  schedule?: "constant" | "inverse_sqrt" | "cosine";
  /** Linear warm-up steps. Default 0. */
  warmupSteps?: number;
  /** Cosine schedule: the step where the learning rate reaches `minLr`. */
  totalSteps?: number;
  /** Cosine schedule: the final learning rate. Default 0. */
  minLr?: number;
  /**
   * What a step whose loss or gradient norm is not finite (NaN, ±Infinity) does. `"error"` (the default):
   * `trainStep` rejects with an `Error` saying so. `"skip"`: it resolves with `skipped: true` instead, as
   * PyTorch's `GradScaler` skips such steps; either way the weights, the Adam moments and the step count
   * (so the schedule's position) are unchanged, and under `"skip"` the model counts the step in
   * {@link StepResult.skippedSteps} (saved in checkpoints with the optimizer state).
   */
  nonFinite?: "error" | "skip";
}

/** The layer choices every model shares. Every field is optional; defaults differ per model (see each config). */
export interface LayerOptions {
  /** Hidden width of the feed-forward layer; 0 (the default) means `4 * dModel`. */
  dFF?: number;
  /** Seed of the weight initialisation (and of dropout). Default 1337. */
  seed?: number;
  /**
   * Feed-forward activation: `"gelu"` is the exact (erf) form (PyTorch's `nn.GELU()`), `"gelu_tanh"` its tanh
   * approximation (`nn.GELU(approximate="tanh")`, GPT-2's `gelu_new`).
   */
  activation?: "relu" | "gelu" | "gelu_tanh";
  /** `"post"`: x = LN(x + f(x)) (the paper, the tutorials); `"pre"`: x = x + f(LN(x)) (GPT-2). */
  norm?: "post" | "pre";
  /** Biases in the attention and feed-forward projections. Default true. */
  bias?: boolean;
  /** Dropout probability on embeddings, attention weights and sub-layer outputs while training. Default 0. */
  dropout?: number;
  /** `"sinusoidal"` (fixed) or `"learned"` position embeddings. */
  positions?: "sinusoidal" | "learned";
  /** Multiply token embeddings by sqrt(dModel). */
  scaleEmbedding?: boolean;
  /** A final LayerNorm after the last layer. Default true. */
  finalNorm?: boolean;
}

/**
 * Configuration of a decoder-only (GPT-style) {@link LanguageModel}. Defaults: GELU, pre-LN, learned
 * positions, no embedding scaling, head tied to the token embedding.
 */
export interface LanguageModelConfig extends LayerOptions, OptimizerOptions {
  /** Number of distinct token ids; every token must be in `[0, vocabSize)`. */
  vocabSize: number;
  /** Longest sequence (in tokens) the model sees. */
  context: number;
  /** Width of the residual stream (embedding size); must be divisible by `heads`. */
  dModel: number;
  /** Number of attention heads. */
  heads: number;
  /** Number of Transformer blocks. */
  layers: number;
  /** Logits from the token embedding (`true`, the default) or from an own `lm_head.weight`. */
  tieHead?: boolean;
}

/**
 * Configuration of an encoder-decoder {@link Seq2Seq} (the translation tutorial's `nn.Transformer`).
 * Defaults: ReLU, post-LN, sinusoidal positions, embeddings scaled by sqrt(dModel), pad id 0.
 */
export interface Seq2SeqConfig extends LayerOptions, OptimizerOptions {
  /** Source vocabulary size. */
  srcVocab: number;
  /** Target vocabulary size. */
  tgtVocab: number;
  /** Longest source or target sequence. */
  context: number;
  /** Model width; must be divisible by `heads`. */
  dModel: number;
  /** Number of attention heads. */
  heads: number;
  /** Number of encoder layers. */
  encoderLayers: number;
  /** Number of decoder layers. */
  decoderLayers: number;
  /** Padding id in both vocabularies: masked in attention, ignored by the loss. Default 0. */
  padId?: number;
  /** Label smoothing of the cross-entropy, in [0, 1). Default 0. */
  labelSmoothing?: number;
}

/**
 * Configuration of a {@link Classifier} (a Transformer encoder with a classification head).
 * Defaults: ReLU, post-LN, sinusoidal positions, embeddings scaled by sqrt(dModel), the first token
 * pooled, the tutorial's MLP head, pad id 0.
 */
export interface ClassifierConfig extends LayerOptions, OptimizerOptions {
  /** Vocabulary size. */
  vocabSize: number;
  /** Longest sequence. */
  context: number;
  /** Model width; must be divisible by `heads`. */
  dModel: number;
  /** Number of attention heads. */
  heads: number;
  /** Number of encoder layers. */
  layers: number;
  /** Number of classes (>= 2); labels are in `[0, classes)`. */
  classes: number;
  /** `"first"`: the first ([CLS]) token; `"mean"`: the mean over non-pad tokens. */
  pooling?: "first" | "mean";
  /** `"linear"`: Linear(d, classes); `"mlp"`: Linear(d, d/2) → ReLU → dropout → Linear(d/2, classes). */
  head?: "linear" | "mlp";
  /** Padding id: masked in attention (and in mean pooling). Default 0. */
  padId?: number;
}

/**
 * Shape of a batch of token ids laid out row-major as `(batch, seq)`.
 * Give either or both; the other is derived from the array length. With neither, `batch` is 1.
 */
export interface BatchShape {
  batch?: number;
  seq?: number;
}

/**
 * Shape of a {@link Seq2Seq} batch: `src` is `(batch, srcLen)`, the targets `(batch, tgtLen)`.
 * The lengths are derived from the array lengths and `batch` (default 1).
 */
export interface Seq2SeqShape {
  batch?: number;
}

/** Result of a `trainStep`. */
export interface StepResult {
  /**
   * Mean cross-entropy loss over the counted positions, before the update. NaN or ±Infinity only for a
   * step skipped under `nonFinite: "skip"` (a skipped step may also have a finite loss and a non-finite
   * gradient).
   */
  loss: number;
  /**
   * Whether the step was skipped because its loss or gradient norm was not finite (`nonFinite: "skip"`):
   * nothing was updated. Always false under the default `nonFinite: "error"`, where such a step rejects.
   */
  skipped: boolean;
  /** Steps this model has skipped so far, this one included (it continues across `save` and `load`). */
  skippedSteps: number;
}

/** Result of an `evaluate`. */
export interface Metrics {
  /** Mean cross-entropy loss over the counted positions (or examples). */
  loss: number;
  /** Fraction of counted positions (or examples) where the most likely token (class) is the target. */
  accuracy: number;
  /** exp(loss). */
  perplexity: number;
  /** Number of positions (or examples) counted; padding targets are not counted. */
  count: number;
}

/**
 * Options for {@link LanguageModel.generate}: the core's sampling (`qkv/sampling.h`). The logits processors
 * run in Hugging Face's order: repetition penalty, temperature, top-k, top-p, then one draw.
 */
export interface GenerateOptions {
  /** Number of new tokens to generate at most (fewer when a stop token comes first). */
  maxTokens: number;
  /** Softmax temperature, >= 0; 0 picks the most likely token (greedy). Default 1. */
  temperature?: number;
  /** Keep only the k most likely tokens; 0 (the default) keeps all. */
  topK?: number;
  /** Nucleus sampling: keep the most likely tokens up to this probability mass, in (0, 1]; 1 (default) is off. */
  topP?: number;
  /** > 1 discourages tokens already in the context (CTRL's penalty); 1 (default) is off. */
  repetitionPenalty?: number;
  /** Seed of the sampler: the same seed and options give the same tokens. Default: a random seed. */
  seed?: number;
  /**
   * Generation ends after emitting one of these token ids (it is included in the result). Default: the model's
   * {@link LanguageModel.stopTokens} (from {@link LanguageModel.fromPretrained}: the folder's end-of-text; none
   * otherwise); `[]` generates past them.
   */
  stopTokens?: ArrayLike<number>;
  /**
   * Keep each layer's keys and values between tokens (a KV cache): each new token costs one position instead
   * of a re-run of the context. `false` gives the same tokens, slower (for checks and benchmarks). Default true.
   */
  useCache?: boolean;
  /**
   * Aborting it stops generation in the core at the next token: `generate` rejects, and a `stream`'s loop throws,
   * with the signal's reason (an `AbortError` by default); the model is ready for the next call. Already aborted:
   * rejects at once, nothing generated.
   */
  signal?: AbortSignal;
  /**
   * Called with each new token as soon as the core has made it, and its index among the new tokens (0, 1,
   * ...), in order and before the promise resolves; the promise still resolves to all of them. For a chat
   * page that shows text as it is made. When it throws, generation stops and the promise rejects with what
   * it threw (the model stays usable). {@link LanguageModel.stream} gives the same tokens as an async iterable.
   */
  onToken?: (token: number, index: number) => void;
}

/**
 * Options for {@link Seq2Seq.generate}: greedy decoding, or beam search with `beamWidth` > 1 (hypotheses
 * scored log P / ((5 + length) / 6)^lengthPenalty, GNMT's penalty; a row stops, as Hugging Face's beam search does,
 * when its best live beam, scored at its current length, would not enter its best `beamWidth` finished ones). Width
 * 1 is greedy decoding exactly.
 */
export interface Seq2SeqGenerateOptions {
  /** Number of target tokens per row at most; must be below the model's context. */
  maxTokens: number;
  /** The id the decoder starts from. */
  bos: number;
  /** The id that ends a row (it is included; the rest of the row is `padId`). */
  eos: number;
  /** Number of source rows in `src` (default 1); `src` is `(batch, srcLen)`. */
  batch?: number;
  /** Beam search width, 1 to 64; 1 (the default) decodes greedily. */
  beamWidth?: number;
  /** GNMT's length penalty alpha, >= 0 (0 ranks by log-probability alone). Default 0.6, the paper's. */
  lengthPenalty?: number;
  /** KV caches for the decoder (see {@link GenerateOptions.useCache}). Default true. */
  useCache?: boolean;
}

/** Which attention map {@link LanguageModel.attention} and friends return. */
export interface AttentionOptions {
  /** Layer index, from 0. */
  layer: number;
  /** Head index, from 0. */
  head: number;
  /** Which row of the last batch, from 0. Default 0. */
  batchIndex?: number;
}

/** Attention of a {@link Seq2Seq}: which of its three kinds. */
export interface Seq2SeqAttentionOptions extends AttentionOptions {
  /**
   * `"encoder"`: encoder self-attention (srcLen, srcLen); `"decoder"`: masked decoder self-attention
   * (tgtLen, tgtLen); `"cross"`: decoder over encoder (tgtLen, srcLen).
   */
  kind: "encoder" | "decoder" | "cross";
}

/** Bytes a model holds in the wasm heap, by what for. */
/** How weight matrices are stored after {@link Model.quantize} (README "Quantized weights"). */
export type WeightFormat = "int8" | "q4" | "f16" | "bf16";

/** What {@link Model.quantize} takes. */
export interface QuantizeOptions {
  /**
   * `int8`: one float32 scale per output row (held-out perplexity within 0.5% of float32); `q4`: 4 bits in groups
   * of 32 with a bfloat16 scale per group (within 5%); `f16` / `bf16`: half-precision storage, computed in
   * float32.
   */
  weights: WeightFormat;
  /**
   * Also store the token embedding packed. Default: `true` exactly when it is also the output head (a language
   * model with `tieHead`, GPT-2's), whose product every generated token reads whole.
   */
  embedding?: boolean;
  /**
   * `"int8"` (int8 and q4 weights only): while decoding, each product with the packed weights quantizes its
   * activations to int8 in blocks of 32 (llama.cpp's Q8_0 rule) and sums integer products: faster in the wasm core,
   * each product moved by the activations' rounding to 8 bits (README "Quantized weights" has the figures). Saved in
   * the checkpoint. Default `"f32"`: the float32 product of the dequantized weights. {@link Model.setQuantActivations}
   * changes it later.
   */
  activations?: QuantActivations;
}

/** The activations of the products with int8 and q4 weights ({@link QuantizeOptions.activations}). */
export type QuantActivations = "f32" | "int8";

/**
 * Activation recomputation ("gradient checkpointing", {@link Model.setRecompute}): `"on"` keeps only each
 * transformer layer's input for the backward, which runs the layer's forward again first; `"off"` keeps every
 * layer's activations; `"auto"` (the default) is on while the model has LoRA adapters.
 */
export type Recompute = "auto" | "on" | "off";

/**
 * The Linear roles a LoRA adapter can sit on ({@link Model.addLora}): `"q"`, `"k"`, `"v"` the rows of attention's
 * in-projection for queries, keys and values (one adapter each); `"qkv"` the in-projection whole (one adapter of
 * out-size 3·dModel, as PEFT adapts GPT-2's `c_attn`); `"out"` attention's out-projection; `"up"` and `"down"` the
 * feed-forward's first (dModel → dFF) and second (dFF → dModel) Linear; `"head"` the output projection (a language
 * model's head, also when tied to the embedding: the adapter then adapts the head product only; the classifier's
 * final layer(s); seq2seq's generator). Every attention module gets the attention targets (seq2seq: encoder self,
 * decoder self and cross). `"q"` / `"k"` / `"v"` together with `"qkv"` is refused (they overlap).
 */
export type LoraTarget = "q" | "k" | "v" | "qkv" | "out" | "up" | "down" | "head";

/**
 * What {@link Model.addLora} takes: each targeted Linear then computes
 * `y = x W^T + b + (alpha / rank) · dropout(x) A^T B^T` with A (rank, in) drawn Kaiming-uniform (a = sqrt(5), as PEFT
 * does) and B (out, rank) zero, so the model's outputs are the base's until it trains.
 */
export interface LoraOptions {
  /** r, the adapters' inner size: an integer >= 1 (default 8). */
  rank?: number;
  /** The adapters' output is scaled by alpha / rank: a finite number > 0 (default 16). */
  alpha?: number;
  /** Dropout on the adapter's input only (PEFT's `lora_dropout`), in [0, 1) (default 0). */
  dropout?: number;
  /** The Linear roles that get an adapter, each at most once (default `["qkv", "out"]`). */
  targets?: LoraTarget[];
  /** Seed of A's initial draws: an integer >= 0 (default 0). */
  seed?: number;
}

/** A model's adapters as {@link Model.lora} reports them: every option filled in. */
export type LoraInfo = Readonly<Required<Omit<LoraOptions, "targets">>> & { readonly targets: readonly LoraTarget[] };

/** An adapter alone, as PEFT saves it: {@link Model.saveAdapter}'s result, {@link Model.loadAdapter}'s input. */
export interface AdapterFiles {
  /** `adapter_config.json`'s text: r, lora_alpha, lora_dropout, target_modules, fan_in_fan_out, ... */
  config: string;
  /** `adapter_model.safetensors`' bytes: each adapter's `lora_A.weight` (rank, in) and `lora_B.weight` (out, rank). */
  safetensors: Uint8Array;
}

/** What {@link Model.saveAdapter} takes. */
export interface SaveAdapterOptions {
  /**
   * The tensors' and target modules' names: `"qkv"` qkv's own (`base_model.model.layers.0.self_attn.in_proj...`,
   * the default), `"gpt2"` those of Hugging Face's GPT-2 (`base_model.model.transformer.h.0.attn.c_attn...`,
   * `fan_in_fan_out: true`), so that PEFT loads the adapter onto `GPT2LMHeadModel`; GPT-2 has no separate
   * q, k, v modules, so adapters on those targets are refused in GPT-2 names.
   */
  names?: "qkv" | "gpt2";
}

export interface MemoryUsage {
  /** Weights: float32, and quantized ones with their scales ({@link Model.quantize}). */
  parameters: number;
  /** One gradient per trainable weight: with LoRA adapters ({@link Model.addLora}) the adapters' only. */
  gradients: number;
  /** Adam's two moments per trainable weight: with LoRA adapters the adapters' only. */
  optimizer: number;
  /** The activation arena, sized for the largest batch × sequence seen so far. */
  activations: number;
  /** The sum. */
  total: number;
}

/** What {@link memory} reports. */
export interface MemoryReport {
  /** The models not yet disposed, with what each holds. */
  models: { id: number; kind: ModelKind; bytes: MemoryUsage }[];
  /** Current size of the wasm heap (it grows on demand and never shrinks). */
  heapBytes: number;
  /** Bytes of the heap in use (allocated and not freed): what a forgotten `dispose()` makes grow. */
  heapUsedBytes: number;
  /** The most the heap may grow to (4 GiB). */
  heapMaxBytes: number;
}

/** One output of one op's case in {@link checkBackend}: how far the running executor is from the trusted one. */
export interface OpCheck {
  /** The case and output, e.g. `"gemm 17 64 257 t3 beta 0.500000: C"`. */
  name: string;
  /** The largest difference, relative to max(1, |expected|) (or to the output's largest value for sums). */
  error: number;
  /** What `error` may reach (0: the same bits). */
  tol: number;
  ok: boolean;
  /** The first element past its bound, when not ok. */
  detail?: string;
}

/** What {@link checkBackend} resolves to. */
export interface BackendCheck {
  /** The executor checked: the one new models run on. */
  backend: "webgpu" | "wasm";
  /** What it was compared with: the wasm core's CPU executor (for WebGPU), or plain loops (for wasm). */
  against: "wasm" | "reference";
  results: OpCheck[];
}

/** How far a streamed load has come: bytes taken by the core, of `total` (undefined while unknown). */
export interface LoadProgress {
  loaded: number;
  total: number | undefined;
}

/** Options of a model class's `load`. */
export interface LoadOptions {
  /** Called after each piece the core has taken (a few MiB), with the bytes so far. */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Cancels the load: it then rejects with the signal's reason (an `AbortError` DOMException unless the reason
   * given to `abort()` was another Error); the partly loaded model is freed and the core stays usable.
   */
  signal?: AbortSignal;
}

/**
 * What a checkpoint can be loaded from: its bytes, a `fetch` Response (streamed as it downloads), a `File` or
 * other `Blob` (streamed from disk), or a stream of byte chunks.
 */
export type CheckpointSource = Uint8Array | ArrayBuffer | Response | Blob | ReadableStream<Uint8Array>;

/**
 * One file of a model folder given in memory or on disk: a `File`/`Blob` (read as a stream), its bytes, or its
 * text (a string is the file's contents, not a URL).
 */
export type PretrainedFile = Blob | Uint8Array | ArrayBuffer | string;

/**
 * Where {@link LanguageModel.fromPretrained} reads a Hugging Face model folder from:
 * - a URL of the folder (`"https://huggingface.co/gpt2/resolve/main/"`, or any base URL, relative to the page in
 *   a browser; the trailing slash is optional): each file is fetched at `<folder>/<name>`;
 * - the files a user picked or dropped: a `FileList` (typed here as `ArrayLike<File>`, so that the declarations
 *   need no DOM lib) or an array of `File`s, found by their names (when a picked folder holds two files of one
 *   name, the one nearest its top is used);
 * - a record of file name to contents: `{ "config.json": ..., "model.safetensors": ..., "tokenizer.json": ... }`.
 */
export type PretrainedSource = string | URL | ArrayLike<File> | Readonly<Record<string, PretrainedFile>>;

/** How far {@link LanguageModel.fromPretrained} has read one of the folder's files. */
export interface PretrainedProgress extends LoadProgress {
  /** The file's name: `"config.json"`, `"tokenizer.json"`, `"model.safetensors"`, `"model-00001-of-00002.safetensors"`, ... */
  file: string;
}

/** Options of {@link LanguageModel.fromPretrained}. */
export interface PretrainedOptions {
  /**
   * Called as each file's bytes arrive, with that file's bytes so far and its size (from `Content-Length` or
   * the `File`'s size; undefined while unknown). The files come one after another: config.json, the
   * tokenizer's, then model.safetensors (or model.safetensors.index.json, then each shard it names).
   */
  onProgress?: (progress: PretrainedProgress) => void;
  /**
   * Cancels: the downloads stop and the call rejects with the signal's reason (an `AbortError` DOMException
   * unless `abort()` was given another Error); nothing stays in the core.
   */
  signal?: AbortSignal;
  /**
   * How the weights are held. `"f32"` (the default): every tensor converted to float32, as trained; the model
   * generates and fine-tunes. `"keep"`: the weight matrices that `model.safetensors` stores as F16 or BF16 (every
   * Linear weight and the tied token embedding) stay in that format, written into the core without a float32 copy,
   * so loading takes about half the memory (`memory().parameters`); the model is the one `"f32"` then
   * `quantize({ weights: "f16" | "bf16" })` makes, bit for bit, and like it is for inference (LoRA adapters train on
   * it). A float32 file loads as with `"f32"`.
   */
  weights?: "f32" | "keep";
}
