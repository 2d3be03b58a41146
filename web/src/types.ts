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
   * Where the build files live (`qkv.js`, `qkv.wasm`, `qkv.worker.js`, `qkv-st.js`, `qkv-st.wasm`):
   * a URL of their folder in the browser (e.g. a CDN), a folder path or `file:` URL in Node.
   * Defaults to the `wasm/` folder shipped beside this package's JavaScript.
   */
  wasmPath?: string | URL;
  /**
   * `true` demands the threaded build (rejects when the page is not cross-origin isolated),
   * `false` forces the single-threaded build. Default: threaded where the environment allows it.
   */
  threaded?: boolean;
}

/** What runs, as reported by {@link init}. */
export interface RuntimeInfo {
  /** Whether the threaded (pthreads + SharedArrayBuffer) build is running. */
  threaded: boolean;
  /** Number of threads the core uses (1 for the single-threaded build). */
  threads: number;
  /** SIMD instruction set of the core's kernels, e.g. `"sse4.1"` (WebAssembly SIMD128). */
  simd: string;
  /** Version reported by the loaded core (equal to the package version). */
  version: string;
}

/** Configuration of a decoder-only (GPT-style) {@link LanguageModel}. */
export interface LanguageModelConfig {
  /** Number of distinct token ids; every token must be in `[0, vocabSize)`. */
  vocabSize: number;
  /** Longest sequence (in tokens) the model sees: the size of the learned position table. */
  context: number;
  /** Width of the residual stream (embedding size); must be divisible by `heads`. */
  dModel: number;
  /** Number of attention heads. */
  heads: number;
  /** Number of Transformer blocks. */
  layers: number;
  /** Hidden width of the feed-forward layer. Default `4 * dModel`. */
  dFF?: number;
  /** Seed of the weight initialisation. Default 1337. */
  seed?: number;
  /** AdamW learning rate. Default 1e-3. */
  lr?: number;
  /** AdamW beta1. Default 0.9. */
  beta1?: number;
  /** AdamW beta2. Default 0.99. */
  beta2?: number;
  /** AdamW epsilon. Default 1e-8. */
  eps?: number;
  /** AdamW decoupled weight decay. Default 0.1. */
  weightDecay?: number;
  /** Clip the global gradient norm to this value before each update (0: no clipping). Default 1. */
  gradClip?: number;
}

/**
 * Shape of a batch of token ids laid out row-major as `(batch, seq)`.
 * Give either or both; the other is derived from the array length. With neither, `batch` is 1.
 */
export interface BatchShape {
  batch?: number;
  seq?: number;
}

/** Result of {@link LanguageModel.trainStep} and {@link LanguageModel.evaluate}. */
export interface StepResult {
  /** Mean cross-entropy loss over all `batch * seq` positions (before the update, for `trainStep`). */
  loss: number;
}

/** Options for {@link LanguageModel.generate}. */
export interface GenerateOptions {
  /** Number of new tokens to sample. */
  maxTokens: number;
  /** Softmax temperature, >= 0; 0 picks the most likely token (greedy). Default 1. */
  temperature?: number;
  /** Seed of the sampler (an integer in [0, 2^32)). Default: a random seed. */
  seed?: number;
}
