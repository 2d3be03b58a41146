// The public API of qkv, the same in Node and in the browser. The entries (node.ts, browser.ts) plug in how
// the core is loaded and where it runs; everything here is promise-based and checks its arguments.

export type {
  AttentionOptions,
  BackendCheck,
  BatchShape,
  ClassifierConfig,
  GenerateOptions,
  InitOptions,
  LanguageModelConfig,
  CheckpointSource,
  LoadOptions,
  LoadProgress,
  PretrainedFile,
  PretrainedOptions,
  PretrainedProgress,
  PretrainedSource,
  QuantActivations,
  Recompute,
  QuantizeOptions,
  WeightFormat,
  AdapterFiles,
  LoraInfo,
  LoraOptions,
  LoraTarget,
  SaveAdapterOptions,
  LayerOptions,
  MemoryReport,
  MemoryUsage,
  Metrics,
  OpCheck,
  ModelKind,
  OptimizerOptions,
  RuntimeInfo,
  Seq2SeqAttentionOptions,
  Seq2SeqConfig,
  Seq2SeqGenerateOptions,
  Seq2SeqShape,
  StepResult,
} from "./types.js";
export { checkBackend, info, init, memory } from "./runtime.js";
export { Model, type SaveOptions } from "./model.js";
export { checkpointMetadata } from "./checkpoint.js";
export { LanguageModel } from "./language-model.js";
export { Seq2Seq } from "./seq2seq.js";
export { Classifier } from "./classifier.js";
export {
  BpeTokenizer,
  ByteTokenizer,
  CharTokenizer,
  Tokenizer,
  WordTokenizer,
  type AnyTokenizer,
  type DecodeOptions,
  type EncodeOptions,
  type HfTokenizerJSON,
  type SpecialTokenOptions,
  type TokenizerJSON,
} from "./tokenizer.js";
export {
  Trainer,
  type ClassifierExample,
  type EvalProgress,
  type FitOptions,
  type FitResult,
  type Seq2SeqExample,
  type StepProgress,
  type TrainerOptions,
} from "./trainer.js";
export { VERSION } from "./version.js";
