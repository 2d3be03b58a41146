// save({ tokenizer, metadata }): a checkpoint carries its tokenizer under "qkv.tokenizer" (where `qkv train`
// puts it) and string keys of the user's own, written by the core in the one header it writes. The file still
// loads to the same logits and its checksums still verify; the keys the checkpoint writes itself cannot be
// replaced; wrong types reject with a TypeError naming the option. (The native `qkv generate` running such a
// file: native-parity.test.ts.)
import { beforeAll, describe, expect, it } from "vitest";
import {
  ByteTokenizer,
  CharTokenizer,
  Classifier,
  checkpointMetadata,
  init,
  LanguageModel,
  Seq2Seq,
  Tokenizer,
  WordTokenizer,
  type AnyTokenizer,
} from "../../web/dist/node.js";
import { PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

const BATCH = 4;
const SEQ = 16;
let tok: CharTokenizer;
let data: Int32Array;

beforeAll(async () => {
  await init({ threads: 2 });
  // Specials on: the round trip must keep their ids too.
  tok = await CharTokenizer.fromText(PATTERN_TEXT + "ÉÀ✓");
  data = await tok.encode(PATTERN_TEXT);
});

async function trained(seed: number): Promise<LanguageModel> {
  const m = await LanguageModel.create({ vocabSize: tok.size, context: SEQ, dModel: 32, heads: 4, layers: 1, lr: 1e-2, seed });
  const random = rng(seed);
  for (let i = 0; i < 5; i++) {
    const { inputs, targets } = sampleBatch(data, BATCH, SEQ, random);
    await m.trainStep(inputs, targets, { batch: BATCH });
  }
  return m;
}

/** The tensor bytes of a safetensors file (everything after the header). */
function tensorBytes(file: Uint8Array): Uint8Array {
  const n = Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  return file.subarray(8 + n);
}

/** Same kind, vocabulary, special ids, and the same ids and text for the same input. */
async function expectSameTokenizer(got: AnyTokenizer, want: AnyTokenizer, text: string): Promise<void> {
  expect(got.constructor).toBe(want.constructor);
  expect(JSON.stringify(got)).toBe(JSON.stringify(want));
  expect(got.vocabulary).toEqual(want.vocabulary);
  expect([got.size, got.padId, got.bosId, got.eosId, got.unkId]).toEqual([want.size, want.padId, want.bosId, want.eosId, want.unkId]);
  const ids = await want.encode(text, { bos: want.bosId !== undefined, eos: want.eosId !== undefined });
  expect(ids.length).toBeGreaterThan(3);
  expect(Array.from(await got.encode(text, { bos: want.bosId !== undefined, eos: want.eosId !== undefined }))).toEqual(Array.from(ids));
  expect(await got.decode(ids)).toBe(await want.decode(ids));
  expect(await got.decode(ids, { skipSpecial: false })).toBe(await want.decode(ids, { skipSpecial: false }));
}

describe("save({ tokenizer, metadata })", () => {
  it("stores the tokenizer and the keys; the tokenizer comes back exactly; the model loads to identical logits", async () => {
    using m = await trained(3);
    const extra = { "app.name": "shakespeare-demo", "app.note": 'café ✓ "quoted"\n\ttab', "": "empty key" };
    const bytes = await m.save({ tokenizer: tok, metadata: extra });
    const plain = await m.save();

    const meta = await checkpointMetadata(bytes);
    expect(meta["qkv.tokenizer"]).toBe(JSON.stringify(tok));
    for (const [k, v] of Object.entries(extra)) expect(meta[k]).toBe(v);
    // Everything the core writes is there, unchanged: the extra keys are added, nothing replaced.
    const plainMeta = await checkpointMetadata(plain);
    expect(Object.keys(meta).sort()).toEqual([...Object.keys(plainMeta), "qkv.tokenizer", ...Object.keys(extra)].sort());
    for (const [k, v] of Object.entries(plainMeta)) expect(meta[k], k).toBe(v);
    expect(meta["qkv.model"]).toBe("language_model");
    expect(meta["qkv.step"]).toBe("5");
    expect(Buffer.from(tensorBytes(bytes)).equals(Buffer.from(tensorBytes(plain)))).toBe(true);

    const back = await Tokenizer.fromCheckpoint(bytes);
    expect(back).toBeInstanceOf(CharTokenizer);
    await expectSameTokenizer(back, tok, "the lazy dog ÉÀ✓ jumps, unknown: #~");
    expect(Array.from(await back.encode("#"))).toEqual([tok.unkId]);

    // load() verifies the CRC-32s and gives the same model, which trains on identically.
    using again = await LanguageModel.load(bytes);
    const probe = sampleBatch(data, BATCH, SEQ, rng(40));
    expect(await again.predict(probe.inputs, { batch: BATCH })).toEqual(await m.predict(probe.inputs, { batch: BATCH }));
    expect((await again.trainStep(probe.inputs, probe.targets, { batch: BATCH })).loss).toBe(
      (await m.trainStep(probe.inputs, probe.targets, { batch: BATCH })).loss,
    );
    // A damaged tensor is still refused.
    const bad = bytes.slice();
    bad[bad.length - 3] ^= 0x10;
    await expect(LanguageModel.load(bad)).rejects.toThrow(/is corrupt/);

    // Weights only, with the tokenizer: a smaller file that loads and decodes the same.
    const light = await m.save({ optimizer: false, tokenizer: tok });
    expect(light.length).toBeLessThan(bytes.length / 2);
    using l = await LanguageModel.load(light);
    expect(await l.predict(probe.inputs, { batch: BATCH })).toEqual(await m.predict(probe.inputs, { batch: BATCH }));
    const prompt = await tok.encode("the quick");
    const out = await l.generate(prompt, { maxTokens: 20, temperature: 0 });
    expect(await (await Tokenizer.fromCheckpoint(light)).decode(out)).toBe(await tok.decode(out));
  });

  it("byte and word tokenizers, and seq2seq and classifier models", async () => {
    const byte = await ByteTokenizer.create({ specials: { unk: false } });
    const word = await WordTokenizer.fromText("The cat sat on the mat. The dog sat too!", { maxVocab: 12 });
    using s2s = await Seq2Seq.create({ srcVocab: byte.size, tgtVocab: word.size, context: 8, dModel: 16, heads: 2, encoderLayers: 1, decoderLayers: 1 });
    const sBytes = await s2s.save({ tokenizer: byte, metadata: { "qkv.tokenizer.target": JSON.stringify(word) } });
    await expectSameTokenizer(await Tokenizer.fromCheckpoint(sBytes), byte, "bytes é \u0000 ok");
    await expectSameTokenizer(await Tokenizer.fromCheckpoint(sBytes, "qkv.tokenizer.target"), word, "The dog sat on a mat!");
    const src = Int32Array.of(5, 6, 7, 8), tgtIn = Int32Array.of(1, 4, 5);
    using s2 = await Seq2Seq.load(sBytes);
    expect(await s2.predict(src, tgtIn)).toEqual(await s2s.predict(src, tgtIn));

    using cls = await Classifier.create({ vocabSize: word.size, context: 6, dModel: 16, heads: 2, layers: 1, classes: 3 });
    const labels = JSON.stringify(["weather", "food", "sport"]);
    const cBytes = await cls.save({ tokenizer: word, metadata: { "qkv.labels": labels } });
    expect((await checkpointMetadata(cBytes))["qkv.labels"]).toBe(labels);
    await expectSameTokenizer(await Tokenizer.fromCheckpoint(cBytes), word, "the cat sat, the dog too.");
    using c2 = await Classifier.load(cBytes);
    const tokens = Int32Array.of(1, 5, 6, 7, 0, 0);
    expect(await c2.predict(tokens)).toEqual(await cls.predict(tokens));
  });

  it("refuses the keys the checkpoint writes itself, naming the key; the model stays usable", async () => {
    using m = await trained(5);
    const reserved = [
      "qkv.model", "qkv.config", "qkv.optimizer", "qkv.step", "qkv.skipped_steps", "qkv.passes", "qkv.optimizer_state",
      "qkv.version", "qkv.crc32", "format",
    ];
    // Exactly the keys save() writes without options: a new one the core adds is reserved (and listed here).
    expect([...reserved].sort()).toEqual(Object.keys(await checkpointMetadata(await m.save())).sort());
    for (const key of reserved) {
      const saving = m.save({ metadata: { "app.ok": "1", [key]: "x" } });
      await expect(saving).rejects.toThrow(new RegExp(`metadata key "${key.replaceAll(".", "\\.")}" is reserved: the checkpoint writes it itself`));
      await expect(saving).rejects.not.toBeInstanceOf(TypeError);
      await expect(m.save({ optimizer: false, tokenizer: tok, metadata: { [key]: "x" } })).rejects.toThrow(`"${key}" is reserved`);
    }
    // The tokenizer twice: refused rather than one silently winning.
    await expect(m.save({ tokenizer: tok, metadata: { "qkv.tokenizer": "{}" } })).rejects.toThrow(
      /options\.metadata\["qkv\.tokenizer"\] and options\.tokenizer both give the key "qkv\.tokenizer"/,
    );
    // Still usable, and a key only the qkv tool uses is the caller's to write.
    const bytes = await m.save({ metadata: { "qkv.tokenizer": JSON.stringify(tok), "qkv.train": '{"seed":1}' } });
    expect((await checkpointMetadata(bytes))["qkv.train"]).toBe('{"seed":1}');
    await expectSameTokenizer(await Tokenizer.fromCheckpoint(bytes), tok, "the fox");
    // A key the metadata object only inherits is not in the file.
    await expect(Tokenizer.fromCheckpoint(bytes, "toString")).rejects.toThrow(/the checkpoint has no "toString" metadata/);
    await expect(Tokenizer.fromCheckpoint(bytes, "__proto__")).rejects.toThrow(/the checkpoint has no "__proto__" metadata/);
    // A tokenizer with more ids than the model's vocabulary is refused, naming both sizes.
    using small = await LanguageModel.create({ vocabSize: tok.size - 1, context: SEQ, dModel: 32, heads: 4, layers: 1 });
    await expect(small.save({ tokenizer: tok })).rejects.toThrow(
      `options.tokenizer has ${tok.size} tokens, more than the model's vocabulary of ${tok.size - 1}`,
    );
  });

  it("rejects wrong types with a TypeError naming the option", async () => {
    using m = await trained(7);
    const bad = (o: unknown) => m.save(o as Parameters<LanguageModel["save"]>[0]);
    const typeError = async (o: unknown, message: RegExp) => {
      const saving = bad(o);
      await expect(saving).rejects.toBeInstanceOf(TypeError);
      await expect(saving).rejects.toThrow(message);
    };
    await typeError(5, /options must be an object like \{ optimizer\?, tokenizer\?, metadata\? \}, got 5 \(a number\)/);
    await typeError({ metadata: "a=b" }, /options\.metadata must be an object of string values like \{ "key": "value" \}, got "a=b" \(a string\)/);
    await typeError({ metadata: null }, /options\.metadata must be an object of string values.*got null/);
    await typeError({ metadata: [["a", "b"]] }, /options\.metadata must be an object of string values.*got an Array/);
    await typeError({ metadata: new Map([["a", "b"]]) }, /options\.metadata must be an object of string values.*got a Map/);
    await typeError({ metadata: { a: "1", b: 2 } }, /options\.metadata\["b"\] must be a string, got 2 \(a number\)/);
    await typeError({ metadata: { a: undefined } }, /options\.metadata\["a"\] must be a string, got undefined/);
    await typeError({ metadata: { a: { nested: "x" } } }, /options\.metadata\["a"\] must be a string, got an Object/);
    await typeError({ tokenizer: "char" }, /options\.tokenizer must be a tokenizer of this package .*got "char" \(a string\)/);
    await typeError({ tokenizer: tok.toJSON() }, /options\.tokenizer must be a tokenizer of this package .*got an Object/);
    await typeError({ tokenizer: { ...tok, toJSON: () => tok.toJSON() } }, /options\.tokenizer must be a tokenizer of this package/);
    await typeError({ tokenizer: null }, /options\.tokenizer must be a tokenizer of this package .*got null/);
    await typeError({ optimizer: "yes" }, /options\.optimizer must be true or false/);
    // Text that has no UTF-8 form: a bad value (Error), not a bad type.
    const lone = bad({ metadata: { a: "x\uD800y" } });
    await expect(lone).rejects.toThrow(/options\.metadata\["a"\] has a lone surrogate U\+D800 at index 1/);
    await expect(lone).rejects.not.toBeInstanceOf(TypeError);
    await expect(bad({ metadata: { "k\uDC00": "v" } })).rejects.toThrow(/options\.metadata key "k\\udc00" has a lone surrogate U\+DC00/);
    // An object without a prototype is a plain object too, and keys that are Object.prototype's names stay keys.
    const bare = Object.assign(Object.create(null) as Record<string, string>, { "app.k": "v" });
    expect((await checkpointMetadata(await m.save({ metadata: bare })))["app.k"]).toBe("v");
    const tricky = JSON.parse('{"__proto__": "p", "constructor": "c", "toString": "t"}') as Record<string, string>;
    const meta = await checkpointMetadata(await m.save({ metadata: tricky }));
    expect(Object.hasOwn(meta, "__proto__")).toBe(true);
    expect([meta["__proto__"], meta["constructor"], meta["toString"]]).toEqual(["p", "c", "t"]);
  });
});
