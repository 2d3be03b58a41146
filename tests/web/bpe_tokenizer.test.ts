// BpeTokenizer (the core's byte-level BPE through the package) against Hugging Face's own JavaScript
// implementation, @huggingface/tokenizers, in the same process, and against GPT-2's published vocabulary:
// gpt-tokenizer's r50k_base ranks, rebuilt into GPT-2's tokenizer.json at run time (not committed; 50,000
// merges) by tests/fixtures/gpt2_from_ranks.mjs. Also: training, exported and loaded by Hugging Face's
// implementation, and the checkpoint path.
import { readFileSync } from "node:fs";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { encode as gptEncode } from "gpt-tokenizer/encoding/r50k_base";
import { beforeAll, describe, expect, it } from "vitest";
import { BpeTokenizer, init, LanguageModel, Tokenizer } from "../../web/dist/node.js";
// A plain .mjs module (shared with tests/fixtures/make_bpe_fixtures.mjs and bench/bpe_bench.mjs).
import { gpt2TokenizerJson, readR50kRanks } from "../fixtures/gpt2_from_ranks.mjs";

const SHAKESPEARE = readFileSync(new URL("../../../shared/data/tinyshakespeare.txt", import.meta.url), "utf8");

// The hard cases of the pre-tokenizer, the merges and the decoder.
const HARD = [
  "It's, I'm, you're, we've, he'll, she'd, don't; IT'S 'quoted' ''x'' ' s 're",
  "Numbers: 0 1 12 123 1234 12345 3.14159 1e-9 -42 ½ ² Ⅻ ٣ 10,000,000",
  "def f(x):\n    return x ** 2  # square\n\tif (a&&b||c) { y[i] = z->w; }\r\n",
  "   leading and trailing spaces   ",
  "tabs\t\tand\t \tnewlines\n\n\n  mixed \n \t\n",
  "日本語のテキスト、中文文本，한국어 텍스트。",
  "emoji 🙂👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨",
  "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352 \u0915\u094d\u0937 \u0627\u064e\u0644",
  "non-breaking\u00a0space, ideographic\u3000space, line\u2028separator",
  "Ünïcödé: naïve café Москва Ελλάδα עברית العربية हिन्दी",
  "symbols ~!@#$%^&*()_+`-=[]{}|;':\",./<>? «» “curly” — … •",
  "a".repeat(300) + " " + " ".repeat(100) + "b",
];
// A few hundred KB: Shakespeare in slices, with the hard cases between them.
const CORPUS: string[] = [];
for (let i = 0; i < 60; ++i) CORPUS.push(SHAKESPEARE.slice(i * 5000, i * 5000 + 4000), HARD[i % HARD.length]!);

let gpt2Json: Record<string, unknown>;
let hf: HfTokenizer;
let qkv: BpeTokenizer;

beforeAll(async () => {
  await init({ threads: 2 });
  gpt2Json = gpt2TokenizerJson(readR50kRanks());
  hf = new HfTokenizer(gpt2Json, {});
  qkv = await BpeTokenizer.fromJSON(JSON.stringify(gpt2Json));
});

const ids = async (t: BpeTokenizer, text: string, splitSpecial = false) =>
  Array.from(await t.encode(text, { splitSpecial }));

describe("BpeTokenizer with GPT-2's vocabulary", () => {
  it("is GPT-2: 50,257 tokens, <|endoftext|> = 50256 as bos and eos", () => {
    expect(qkv.kind).toBe("bpe");
    expect(qkv.size).toBe(50257);
    expect([qkv.bosId, qkv.eosId, qkv.padId, qkv.unkId]).toEqual([50256, 50256, undefined, undefined]);
    expect(qkv.vocabulary[262]).toBe("Ġthe");
  });

  it("encodes the corpus to @huggingface/tokenizers' ids and to gpt-tokenizer's r50k_base ids", async () => {
    let bytes = 0;
    for (const text of CORPUS) {
      const got = await ids(qkv, text);
      expect(got, text.slice(0, 80)).toEqual(hf.encode(text).ids);
      expect(got, text.slice(0, 80)).toEqual(gptEncode(text));
      bytes += Buffer.byteLength(text);
    }
    expect(bytes).toBeGreaterThan(200_000);
  });

  it("matches special tokens anywhere, or splits them with splitSpecial", async () => {
    const text = "Document one.<|endoftext|>Document two.\n<|endoftext|> <|endoftext|><|endoftext|>end";
    expect(await ids(qkv, text)).toEqual(hf.encode(text).ids);
    expect((await ids(qkv, text)).filter((i) => i === 50256)).toHaveLength(4);
    // gpt-tokenizer encodes special tokens as plain text unless allowed: that is splitSpecial.
    expect(await ids(qkv, text, true)).toEqual(gptEncode(text, { allowedSpecial: new Set() , disallowedSpecial: new Set() }));
  });

  it("decodes any ids as @huggingface/tokenizers does, invalid UTF-8 and special tokens included", async () => {
    let seed = 12345;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let n = 0; n < 200; ++n) {
      const seq = Array.from({ length: 1 + Math.floor(random() * 12) }, () =>
        random() < 0.1 ? 50256 : Math.floor(random() * 50257),
      );
      for (const skip of [false, true]) {
        expect(await qkv.decode(seq, { skipSpecial: skip }), JSON.stringify(seq)).toBe(
          hf.decode(seq, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }),
        );
      }
    }
    for (const text of CORPUS.slice(0, 10)) expect(await qkv.decode(await qkv.encode(text))).toBe(text);
  });

  it("loads GPT-2's vocab.json + merges.txt to the same ids", async () => {
    const model = (gpt2Json as { model: { vocab: object; merges: string[] } }).model;
    const files = await BpeTokenizer.fromVocabMerges(JSON.stringify(model.vocab), "#version: 0.2\n" + model.merges.join("\n") + "\n");
    for (const text of CORPUS.slice(0, 8)) expect(await ids(files, text)).toEqual(hf.encode(text).ids);
  });
});

describe("BpeTokenizer.train", () => {
  it("is deterministic, exported as a tokenizer.json that @huggingface/tokenizers loads and agrees with", async () => {
    const text = SHAKESPEARE.slice(0, 200_000);
    const a = await BpeTokenizer.train(text, { vocabSize: 1000 });
    const b = await BpeTokenizer.train(text, { vocabSize: 1000 });
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    expect(a.size).toBe(1000);
    const exported = a.toJSON();
    const reference = new HfTokenizer(exported, {});
    for (const t of [...CORPUS.slice(0, 20), ...HARD, "a<|endoftext|>b"]) {
      expect(await ids(a, t), t.slice(0, 80)).toEqual(reference.encode(t).ids);
    }
    // 743 merges learned on the first 200 KB halve the bytes of unseen Shakespeare (4,575 tokens for 10,000).
    const sample = SHAKESPEARE.slice(300_000, 310_000);
    expect((await a.encode(sample)).length).toBeLessThan(Buffer.byteLength(sample) / 2);
    expect(await a.decode(await a.encode(sample))).toBe(sample);
  });

  it("rejects bad options naming them", async () => {
    await expect(BpeTokenizer.train("abc", { vocabSize: 100 })).rejects.toThrow(/vocab_size = 100 is out of range/);
    await expect(BpeTokenizer.train("abc", { vocabSize: 300, specialTokens: [1] as unknown as string[] })).rejects.toThrow(
      /options.specialTokens must be an array of strings/,
    );
  });
});

describe("BpeTokenizer JSON and checkpoints", () => {
  it("Tokenizer.fromJSON recognises a tokenizer.json; malformed files reject naming the field", async () => {
    const t = await Tokenizer.fromJSON(qkv.toJSON());
    expect(t).toBeInstanceOf(BpeTokenizer);
    const wordPiece = { ...gpt2Json, model: { ...(gpt2Json.model as object), type: "WordPiece" } };
    await expect(Tokenizer.fromJSON(JSON.stringify(wordPiece))).rejects.toThrow(/"model.type" = "WordPiece" is not supported/);
    await expect(BpeTokenizer.fromVocabMerges("{}", "#version: 0.2\na\n")).rejects.toThrow(/merges.txt: line 2/);
    await expect(qkv.decode([50257])).rejects.toThrow(/token id 50257 at position 0 is out of range/);
  });

  it("is saved in a checkpoint and read back by fromCheckpoint", async () => {
    const tok = await BpeTokenizer.train(SHAKESPEARE.slice(0, 50_000), { vocabSize: 400 });
    const lm = await LanguageModel.create({ vocabSize: tok.size, context: 16, layers: 1, heads: 2, dModel: 16, dFF: 32 });
    try {
      const bytes = await lm.save({ tokenizer: tok });
      const back = await Tokenizer.fromCheckpoint(bytes);
      expect(back).toBeInstanceOf(BpeTokenizer);
      expect(JSON.stringify(back)).toBe(JSON.stringify(tok));
      expect(Array.from(await back.encode("To be, or not to be"))).toEqual(Array.from(await tok.encode("To be, or not to be")));
    } finally {
      lm.dispose();
    }
  });
});
