// Type-checked (not run) by package.test.ts: the public API as a TypeScript user writes it.
import {
  ByteTokenizer,
  CharTokenizer,
  Classifier,
  init,
  LanguageModel,
  memory,
  Seq2Seq,
  Tokenizer,
  Trainer,
  WordTokenizer,
  checkpointMetadata,
  type ClassifierExample,
  type LanguageModelConfig,
  type MemoryReport,
  type PretrainedProgress,
  type PretrainedSource,
  type Metrics,
  type RuntimeInfo,
  type Seq2SeqExample,
  type StepProgress,
  type TokenizerJSON,
} from "qkv";

export async function main(text: string, signal: AbortSignal): Promise<string> {
  const info: RuntimeInfo = await init({ threads: 4, wasmPath: "https://cdn.example/qkv/" });
  const tok = await CharTokenizer.fromText(text);
  const config: LanguageModelConfig = { vocabSize: tok.size, context: 32, dModel: 64, heads: 4, layers: 2, norm: "pre", schedule: "cosine" };
  using lm = await LanguageModel.create(config);
  const ids = await tok.encode(text);
  const { loss }: { loss: number } = await lm.trainStep(ids.subarray(0, 32), ids.subarray(1, 33), { batch: 1, seq: 32 });
  await lm.setLearningRate(1e-4);
  const out: Int32Array = await lm.generate(await tok.encode("a"), { maxTokens: 10, temperature: 0.8, topK: 40, topP: 0.9, seed: 1, stopTokens: [0] });
  const sources: PretrainedSource[] = ["https://huggingface.co/gpt2/resolve/main/", [new File([text], "config.json")], { "config.json": text }];
  using gpt2 = await LanguageModel.fromPretrained(sources[0]!, { signal, onProgress: (p: PretrainedProgress) => void `${p.file} ${p.loaded}/${p.total ?? "?"}` });
  const written: string = await gpt2.generate("Hello", { maxTokens: 5, temperature: 0 });
  for await (const piece of gpt2.stream("Hello", { maxTokens: 5 })) void (piece satisfies string);
  for await (const token of gpt2.stream(Int32Array.of(1), { maxTokens: 5 })) void (token satisfies number);
  lm.tokenizer = tok;
  void written;
  const logits: Float32Array = await lm.predict(ids.subarray(0, 32));
  const attn: Float32Array = await lm.attention({ layer: 0, head: 1 });
  const bytes: Uint8Array = await lm.save({ optimizer: false });
  using again = await LanguageModel.load(bytes);
  const m: Metrics = await again.evaluate(ids.subarray(0, 32), ids.subarray(1, 33));
  const meta: Record<string, string> = await checkpointMetadata(bytes);
  const heads: number = lm.config.heads;
  const norm: "pre" | "post" = lm.config.norm;

  using s2s = await Seq2Seq.create({ srcVocab: 10, tgtVocab: 10, context: 8, dModel: 16, heads: 2, encoderLayers: 1, decoderLayers: 1 });
  const pairs: Seq2SeqExample[] = [{ src: Int32Array.of(3, 4), tgt: Int32Array.of(1, 4, 3, 2) }];
  await new Trainer(s2s, { data: pairs, batchSize: 1 }).fit({ steps: 1 });
  const translated: Int32Array = await s2s.generate(Int32Array.of(3, 4), { maxTokens: 4, bos: 1, eos: 2 });
  const cross: Float32Array = await s2s.attention({ layer: 0, head: 0, kind: "cross" });

  using cls = await Classifier.create({ vocabSize: 10, context: 8, dModel: 16, heads: 2, layers: 1, classes: 2, pooling: "mean" });
  const labelled: ClassifierExample[] = [{ tokens: Int32Array.of(1, 2), label: 0 }];
  const trainer = new Trainer(cls, { data: labelled, evalData: labelled, batchSize: 1 });
  const onStep = (p: StepProgress): void => void p.tokensPerSecond;
  await trainer.fit({ steps: 2, evalEvery: 1, signal, onStep, onEval: (e) => void e.accuracy });
  const classes: Float32Array = await cls.predict(Int32Array.of(1, 2));

  const word: WordTokenizer = await WordTokenizer.fromText(text, { maxVocab: 100 });
  const byte: ByteTokenizer = await ByteTokenizer.create({ specials: { pad: false } });
  const raw: Uint8Array = await byte.decodeBytes(await byte.encode(Uint8Array.of(1, 2)));
  const json: TokenizerJSON = word.toJSON();
  const back = await Tokenizer.fromJSON(JSON.stringify(json));
  const report: MemoryReport = await memory();
  return [info.threaded, loss, out.length, logits.length, attn.length, m.accuracy, meta["qkv.model"], heads, norm,
    translated.length, cross.length, classes.length, raw.length, back.kind, report.heapUsedBytes, await tok.decode(out)].join(" ");
}
