// The page's machine-readable state: what the e2e tests (and a curious reader, in the console as
// `window.__qkv`) read. Each tab updates its own part; nothing here drives the page.

/** One tab's training progress. */
export interface TrainingState {
  /** "idle" before the first step, "training", "paused", or "error" (the tab's error in `error`). */
  state: "idle" | "training" | "paused" | "error";
  step: number;
  /** Mean training loss of the last 10 steps. */
  lastLoss: number | null;
  /** Loss of the first step of the current model. */
  firstLoss: number | null;
  /** Seconds of training (steps and evaluations; pauses excluded) of the current model. */
  seconds: number;
  /** Training tokens per second of the last 10 steps. */
  tokensPerSecond: number;
  error: string | null;
}

export interface LanguageModelState extends TrainingState {
  /** Validation loss of the last evaluation (held-out last 10% of the text). */
  valLoss: number | null;
  /** Training seconds when the validation loss first fell below 2.0 (the figure). */
  secondsToVal2: number | null;
  /** Step at which the current sample was written (0: none yet). */
  sampleStep: number;
  /** The prompt and what the model wrote after it. */
  sample: string;
  /** Incremented each time a sample is written. */
  samples: number;
}

/** How far one file of a pretrained model's folder has been read. */
export interface FileProgress {
  file: string;
  loaded: number;
  /** The file's size; null while unknown (a compressed download). */
  total: number | null;
}

/** The language-model tab's pretrained section: a GPT-2-family folder loaded, then text streamed from it. */
export interface PretrainedState {
  /** "idle", "loading", "ready" (loaded, or a generation ended), "generating", or "error" (the message in `error`). */
  state: "idle" | "loading" | "ready" | "generating" | "error";
  /** Each file in the order it was read. */
  files: FileProgress[];
  error: string | null;
  /** Incremented each time a load ends (loaded, failed, or cancelled). */
  loads: number;
  /** Where the loaded model came from: its URL, or the names of the files given. */
  source: string;
  /** The new text of the last generation (the prompt excluded), as shown so far. */
  output: string;
  /** Tokens made by the last generation, and their rate over the whole call (prompt included). */
  tokens: number;
  tokensPerSecond: number;
  /** Incremented each time a generation ends (whole, stopped, or failed). */
  generations: number;
}

/** The language-model tab's LoRA panel: adapters fine-tuned on a pasted text, before/after samples, the download. */
export interface LoraState {
  /** "idle", "training", "done" (the steps ran, or Stop), or "error" (the message in `error`). */
  state: "idle" | "training" | "done" | "error";
  /** Steps taken of `steps`. */
  step: number;
  steps: number;
  /** Loss of the first step, and the mean of the last 10. */
  firstLoss: number | null;
  lastLoss: number | null;
  /** Training tokens per second of the last 10 steps. */
  tokensPerSecond: number;
  /** Trainable floats of the adapters (memory().gradients / 4) and the base's parameters. */
  adapterParameters: number;
  baseParameters: number;
  /** Bytes of gradients + Adam moments with the adapters, and what full fine-tuning of the same model would hold. */
  trainingBytes: number;
  fullTrainingBytes: number;
  /** The prompt and the sample the model wrote before and after fine-tuning (same prompt, same seed). */
  prompt: string;
  before: string;
  after: string;
  /** The `names` the adapter downloads in: "gpt2" for a pretrained GPT-2, else "qkv". */
  names: "qkv" | "gpt2";
  /** Incremented each time an adapter is downloaded (both files). */
  downloads: number;
  /** Incremented each time an adapter is loaded from files (its sample is then `after`). */
  loads: number;
  error: string | null;
}

export interface Seq2SeqState extends TrainingState {
  task: string;
  /** Held-out exact-match accuracy (greedy decoding), of the last evaluation. */
  accuracy: number | null;
  /** Training seconds when the held-out accuracy first reached 99%. */
  secondsTo99: number | null;
  /** The last input typed (or picked) and the model's output for it. */
  input: string;
  output: string;
  /** Incremented each time the heatmap is redrawn. */
  heatmaps: number;
}

export interface ClassifierState extends TrainingState {
  accuracy: number | null;
  /** confusion[true][predicted] on the held-out set. */
  confusion: number[][] | null;
}

export interface DemoState {
  crossOriginIsolated: boolean;
  threaded: boolean | null;
  threads: number | null;
  simd: string | null;
  /** Whether the relaxed-SIMD build runs (null until loaded). */
  relaxedSimd: boolean | null;
  /** Set when the core failed to load (the page cannot work at all). */
  error: string | null;
  lm: LanguageModelState;
  pretrained: PretrainedState;
  lora: LoraState;
  seq2seq: Seq2SeqState;
  classifier: ClassifierState;
}

declare global {
  interface Window {
    __qkv: DemoState;
  }
}

function training(): TrainingState {
  return { state: "idle", step: 0, lastLoss: null, firstLoss: null, seconds: 0, tokensPerSecond: 0, error: null };
}

export const state: DemoState = {
  crossOriginIsolated: globalThis.crossOriginIsolated === true,
  threaded: null,
  threads: null,
  simd: null,
  relaxedSimd: null,
  error: null,
  lm: { ...training(), valLoss: null, secondsToVal2: null, sampleStep: 0, sample: "", samples: 0 },
  pretrained: { state: "idle", files: [], error: null, loads: 0, source: "", output: "", tokens: 0, tokensPerSecond: 0, generations: 0 },
  lora: {
    state: "idle", step: 0, steps: 0, firstLoss: null, lastLoss: null, tokensPerSecond: 0, adapterParameters: 0, baseParameters: 0,
    trainingBytes: 0, fullTrainingBytes: 0, prompt: "", before: "", after: "", names: "qkv", downloads: 0, loads: 0, error: null,
  },
  seq2seq: { ...training(), task: "", accuracy: null, secondsTo99: null, input: "", output: "", heatmaps: 0 },
  classifier: { ...training(), accuracy: null, confusion: null },
};

/** Resets the training fields of a tab's state (a new model). */
export function resetTraining(s: TrainingState): void {
  Object.assign(s, training());
}

window.__qkv = state;
