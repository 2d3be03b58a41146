// Type-checked (not run) by package.test.ts: the public API as a TypeScript user writes it.
import { CharTokenizer, init, LanguageModel, type LanguageModelConfig, type RuntimeInfo } from "qkv";

export async function main(text: string): Promise<string> {
  const info: RuntimeInfo = await init({ threads: 4, wasmPath: "https://cdn.example/qkv/" });
  const tok = await CharTokenizer.fromText(text);
  const config: LanguageModelConfig = { vocabSize: tok.size, context: 32, dModel: 64, heads: 4, layers: 2 };
  using lm = await LanguageModel.create(config);
  const ids = await tok.encode(text);
  const { loss }: { loss: number } = await lm.trainStep(ids.subarray(0, 32), ids.subarray(1, 33), { batch: 1, seq: 32 });
  await lm.setLearningRate(1e-4);
  const out: Int32Array = await lm.generate(await tok.encode("a"), { maxTokens: 10, temperature: 0.8, seed: 1 });
  const n: number = lm.numParameters();
  return `${info.threaded} ${info.threads} ${info.simd} ${loss} ${n} ${await tok.decode(out)}`;
}
