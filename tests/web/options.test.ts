// Options and numbers at the package's surface: a misspelt option is refused naming it and the options there are
// (it was ignored, and the call did what the user had not asked: save({ optimiser: false }) kept the optimizer state,
// decode(ids, { skipSpecialTokens: false }) skipped the specials), and an integer past what the core's int holds is
// refused (Embind converts modulo 2^32: attention({ layer: 2 ** 32 + 1 }) was layer 1's map).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BpeTokenizer, CharTokenizer, Classifier, init, LanguageModel, Seq2Seq, Trainer } from "../../web/dist/node.js";

const CONFIG = { vocabSize: 16, context: 8, dModel: 8, heads: 2, layers: 1, seed: 3 };
let lm: LanguageModel;

beforeAll(async () => {
  await init({ threads: 2 });
  lm = await LanguageModel.create(CONFIG);
});
afterAll(() => lm.dispose());

const ids = (...v: number[]) => new Int32Array(v);
const errorOf = async (f: () => unknown): Promise<Error> => {
  try {
    await f();
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected a rejection");
};
// Each case: the call with a misspelt key, the message it must give (a TypeError naming the key and the known ones).
const misspelt: [string, () => unknown, RegExp][] = [
  ["save", () => lm.save({ optimiser: false } as never), /options\.optimiser is not a save option \(known: optimizer, tokenizer, metadata\)/],
  ["quantize", () => lm.quantize({ weights: "int8", embeddings: false } as never), /options\.embeddings is not a quantize option \(known: weights, embedding, activations\)/],
  ["trainStep's shape", () => lm.trainStep(ids(1, 2, 3, 4), ids(2, 3, 4, 5), { batchSize: 2 } as never), /shape\.batchSize is not a shape option \(known: batch, seq\)/],
  ["attention", () => lm.attention({ layer: 0, head: 0, kind: "cross" } as never), /options\.kind is not an attention option \(known: layer, head, batchIndex\)/],
  ["load", async () => LanguageModel.load(await lm.save(), { onprogress: () => {} } as never), /options\.onprogress is not a load option \(known: onProgress, signal\)/],
  ["fromPretrained", () => LanguageModel.fromPretrained({ "config.json": "{}", "model.safetensors": new Uint8Array(8) }, { weight: "keep" } as never), /options\.weight is not a fromPretrained option \(known: onProgress, signal, weights\)/],
  ["BpeTokenizer.train", () => BpeTokenizer.train("hello world", { vocabSize: 300, vocab_size: 5 } as never), /options\.vocab_size is not a BpeTokenizer\.train option/],
  ["CharTokenizer.fromText", () => CharTokenizer.fromText("abc", { special: { bos: false } } as never), /options\.special is not a tokenizer option \(known: specials\)/],
  ["specials", () => CharTokenizer.fromText("abc", { specials: { mask: true } } as never), /options\.specials\.mask is not a special-token option \(known: pad, bos, eos, unk\)/],
  ["Trainer.fit", () => new Trainer(lm, { data: ids(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 2), batchSize: 1 }).fit({ steps: 1, eval_every: 1 } as never), /options\.eval_every is not a fit option/],
];

describe("a misspelt option", () => {
  for (const [name, call, message] of misspelt) {
    it(`${name}: refused naming it`, async () => {
      const e = await errorOf(call);
      expect(e).toBeInstanceOf(TypeError);
      expect(e.message).toMatch(message);
    });
  }

  it("a tokenizer's encode and decode (Hugging Face's names are not these)", async () => {
    const tok = await CharTokenizer.fromText("abc");
    expect((await errorOf(() => tok.encode("ab", { addSpecialTokens: true } as never))).message).toMatch(/options\.addSpecialTokens is not an encode option \(known: bos, eos, splitSpecial\)/);
    expect((await errorOf(() => tok.decode([1, 4], { skipSpecialTokens: false } as never))).message).toMatch(/options\.skipSpecialTokens is not a decode option \(known: skipSpecial\)/);
    // The right name does what it says.
    expect(await tok.decode([1, 4], { skipSpecial: false })).toBe("<bos>a");
  });

  it("the other models' calls too: Seq2Seq's attention takes kind, a Classifier's does not", async () => {
    const s2s = await Seq2Seq.create({ srcVocab: 8, tgtVocab: 8, context: 4, dModel: 8, heads: 2, encoderLayers: 1, decoderLayers: 1 });
    expect((await errorOf(() => s2s.attention({ layer: 0, head: 0, kind: "encoder", batch: 0 } as never))).message).toMatch(/options\.batch is not an attention option \(known: layer, head, batchIndex, kind\)/);
    s2s.dispose();
    const cls = await Classifier.create({ vocabSize: 8, classes: 2, context: 4, dModel: 8, heads: 2, layers: 1 });
    expect((await errorOf(() => cls.attention({ layer: 0, head: 0, kind: "self" } as never))).message).toMatch(/options\.kind is not an attention option/);
    cls.dispose();
  });

  it("the model is unchanged and usable after each refusal", async () => {
    const logits = await lm.predict(ids(1, 2, 3));
    for (const [, call] of misspelt) await errorOf(call);
    expect(await lm.predict(ids(1, 2, 3))).toEqual(logits);
  });
});

describe("an integer past the core's int", () => {
  it("is refused, not wrapped modulo 2^32", async () => {
    await lm.predict(ids(1, 2, 3));
    const layer = await errorOf(() => lm.attention({ layer: 2 ** 32 + 1, head: 0 }));
    expect(layer.message).toBe("options.layer must be an integer in [0, 2147483647], got 4294967297 (a number)");
    const vocab = await errorOf(() => BpeTokenizer.train("hello world", { vocabSize: 2 ** 32 + 300 }));
    expect(vocab.message).toBe("options.vocabSize must be a positive integer no larger than 2147483647, got 4294967596 (a number)");
    const topK = await errorOf(() => lm.generate(ids(1, 2), { maxTokens: 1, topK: 2 ** 32 }));
    expect(topK.message).toBe("options.topK must be an integer in [0, 2147483647], got 4294967296 (a number)");
    // Seeds reach the core as 64-bit numbers: a large one is a seed like any other.
    const a = await lm.generate(ids(1, 2), { maxTokens: 3, seed: 2 ** 40 });
    expect(await lm.generate(ids(1, 2), { maxTokens: 3, seed: 2 ** 40 })).toEqual(a);
  });
});

describe("outputs that are not finite", () => {
  it("reject predict and evaluate naming the cause, where they resolved to NaN", async () => {
    const m = await LanguageModel.create({ ...CONFIG, seed: 1 });
    await m.setLearningRate(1e30); // one step throws the weights to about 1e30: every forward after it overflows
    expect(Number.isFinite((await m.trainStep(ids(1, 2, 3, 4), ids(2, 3, 4, 5))).loss)).toBe(true);
    const p = await errorOf(() => m.predict(ids(1, 2, 3)));
    expect(p.message).toMatch(/^logits\[0\] = -?nan is not finite: the model's weights overflow or hold NaN \(a learning rate far too high/);
    const e = await errorOf(() => m.evaluate(ids(1, 2, 3, 4), ids(2, 3, 4, 5)));
    expect(e.message).toMatch(/^evaluate: the loss is -?nan, not finite/);
    m.dispose();
    // A healthy model is untouched by the check.
    expect((await lm.evaluate(ids(1, 2, 3, 4), ids(2, 3, 4, 5))).count).toBe(4);
  });
});

describe("a number past float32's range", () => {
  it("is refused naming it, where the core would have read infinity", async () => {
    const e = await errorOf(() => lm.generate(ids(1, 2), { maxTokens: 1, repetitionPenalty: 1e40 }));
    expect(e.message).toBe("options.repetitionPenalty must be within +-3.4028234663852886e+38 (a float32), got 1e+40 (a number)");
    const t = await errorOf(() => lm.generate(ids(1, 2), { maxTokens: 1, temperature: 1e39 }));
    expect(t.message).toMatch(/^options\.temperature must be within/);
  });
});

describe("model.tokenizer", () => {
  it("set to something that is not one of the package's tokenizers: a text prompt rejects naming it", async () => {
    lm.tokenizer = { encode: 5 } as never;
    const e = await errorOf(() => lm.generate("hi", { maxTokens: 1 }));
    expect(e).toBeInstanceOf(TypeError);
    expect(e.message).toMatch(/^model\.tokenizer must be a tokenizer of this package \(Tokenizer\.fromJSON, .*got an Object$/);
    lm.tokenizer = undefined;
  });
});
