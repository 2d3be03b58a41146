// Tokenizers through the npm package: they are the core's (qkv/tokenizer.h), so their JSON must be the
// core's byte for byte (the literals below are the ones tests/cpp/io/tokenizer_test.cpp checks natively),
// round-trip, and encode/decode by the same rules. Bad input rejects naming the argument or field.
import { beforeAll, describe, expect, it } from "vitest";
import { ByteTokenizer, CharTokenizer, init, Tokenizer, WordTokenizer, type TokenizerJSON } from "../../web/dist/node.js";

const CATS = "The cat sat. The cat ran!";

beforeAll(async () => {
  await init({ threads: 2 });
});

describe("CharTokenizer", () => {
  it("has the specials then the distinct code points in code point order", async () => {
    const tok = await CharTokenizer.fromText("hello world");
    expect(tok.kind).toBe("char");
    expect(tok.vocabulary).toEqual(["<pad>", "<bos>", "<eos>", "<unk>", " ", "d", "e", "h", "l", "o", "r", "w"]);
    expect([tok.size, tok.padId, tok.bosId, tok.eosId, tok.unkId]).toEqual([12, 0, 1, 2, 3]);
    expect(Array.from(await tok.encode("hello world"))).toEqual([7, 6, 8, 8, 9, 4, 11, 9, 10, 8, 5]);
    expect(await tok.decode([7, 6, 8, 8, 9])).toBe("hello");
  });

  it("code points, not UTF-16 units: an astral character is one token, sorted after the BMP", async () => {
    // JS's default sort compares UTF-16 units, which would put "😀" (D83D DE00) before "\uFB01" (FB01).
    const text = "a\uFB01é😀—";
    const tok = await CharTokenizer.fromText(text, { specials: { pad: false, bos: false, eos: false, unk: false } });
    expect(tok.vocabulary).toEqual(["a", "é", "—", "\uFB01", "😀"]);
    const ids = await tok.encode(text);
    expect(Array.from(ids)).toEqual([0, 3, 1, 4, 2]);
    expect(await tok.decode(ids)).toBe(text);
  });

  it("specials: unk for unknown characters, bos/eos on request, skipped when decoding unless asked", async () => {
    const tok = await CharTokenizer.fromText("abc");
    const ids = await tok.encode("abz", { bos: true, eos: true });
    expect(Array.from(ids)).toEqual([tok.bosId, 4, 5, tok.unkId, tok.eosId]);
    expect(await tok.decode(ids)).toBe("ab<unk>");
    expect(await tok.decode(ids, { skipSpecial: false })).toBe("<bos>ab<unk><eos>");
    const strict = await CharTokenizer.fromText("abc", { specials: { unk: false, bos: false } });
    expect(strict.unkId).toBeUndefined();
    expect(strict.bosId).toBeUndefined();
    await expect(strict.encode("abQ")).rejects.toThrow(/character 'Q' \(U\+0051\) at character 2 \(byte offset 2\) is not in the vocabulary and this tokenizer has no unk token/);
    await expect(strict.encode("a", { bos: true })).rejects.toThrow(/add_bos = true but this tokenizer has no bos token/);
  });

  it("fromVocabulary keeps the given order; the core refuses duplicates and multi-character entries", async () => {
    const tok = await CharTokenizer.fromVocabulary(["z", "a", "é"], { specials: { pad: true, bos: false, eos: false, unk: false } });
    expect(tok.vocabulary).toEqual(["<pad>", "z", "a", "é"]);
    await expect(CharTokenizer.fromVocabulary(["a", "a"])).rejects.toThrow(/"vocab\[1\]" = "a" is a duplicate of vocab\[0\]/);
    await expect(CharTokenizer.fromVocabulary(["ab"])).rejects.toThrow(/"vocab\[0\]" = "ab" is not one character/);
  });
});

describe("ByteTokenizer", () => {
  it("maps bytes to ids after the specials; any bytes round-trip", async () => {
    const tok = await ByteTokenizer.create({ specials: { pad: false, unk: false } });
    expect(tok.size).toBe(258);
    expect(tok.vocabulary.slice(0, 3)).toEqual(["<bos>", "<eos>", "\u0000"]);
    expect(tok.vocabulary[2 + 0xe9]).toBe("\u00e9");
    // "é" is two UTF-8 bytes, C3 A9.
    expect(Array.from(await tok.encode("é"))).toEqual([2 + 0xc3, 2 + 0xa9]);
    const raw = Uint8Array.of(0, 255, 1, 0xc3);
    const ids = await tok.encode(raw, { eos: true });
    expect(Array.from(ids)).toEqual([2, 257, 3, 2 + 0xc3, 1]);
    expect(await tok.decodeBytes(ids)).toEqual(raw);
    // decode() reads UTF-8, replacing what is not.
    expect(await tok.decode(ids)).toBe("\u0000\uFFFD\u0001\uFFFD");
    expect(await tok.decode(await tok.encode("naïve — ok"))).toBe("naïve — ok");
  });
});

describe("WordTokenizer", () => {
  it("keeps the most frequent words (ties byte-wise), lower-cases, splits punctuation, joins without space before it", async () => {
    const tok = await WordTokenizer.fromText(CATS, { maxVocab: 8 });
    expect(tok.lowercase).toBe(true);
    expect(tok.vocabulary).toEqual(["<pad>", "<bos>", "<eos>", "<unk>", "cat", "the", "!", "."]);
    const ids = await tok.encode("The cat sat. A dog ran!");
    expect(Array.from(ids)).toEqual([5, 4, 3, 7, 3, 3, 3, 6]);
    expect(await tok.decode(ids)).toBe("the cat <unk>. <unk> <unk> <unk>!");
    const cased = await WordTokenizer.fromText(CATS, { maxVocab: 20, lowercase: false });
    expect(cased.lowercase).toBe(false);
    expect(await cased.decode(await cased.encode("The cat ran!"))).toBe("The cat ran!");
    await expect(WordTokenizer.fromText(CATS, { maxVocab: 4 })).rejects.toThrow(/max_vocab = 4 is too small: expected at least 5/);
    await expect(WordTokenizer.fromText(CATS, { maxVocab: 8, specials: { unk: false } })).rejects.toThrow(/SpecialTokens::unk = false/);
  });
});

describe("JSON: the core's format, byte for byte, and a round trip", () => {
  it("byte and word tokenizers give the JSON the native tests check", async () => {
    const byte = await ByteTokenizer.create({ specials: { pad: false, unk: false } });
    expect(JSON.stringify(byte)).toBe('{"version":1,"kind":"byte","special":{"pad":false,"bos":true,"eos":true,"unk":false}}');
    const word = await WordTokenizer.fromText(CATS, { maxVocab: 8 });
    expect(JSON.stringify(word)).toBe(
      '{"version":1,"kind":"word","special":{"pad":true,"bos":true,"eos":true,"unk":true},"lowercase":true,"vocab":["cat","the","!","."]}',
    );
  });

  it("fromJSON(JSON.stringify(t)) is the same tokenizer, for every kind, from the string or the object", async () => {
    const text = 'hello — wörld "quoted"\ttab\\slash\u0001 😀';
    const tokenizers = [
      await CharTokenizer.fromText(text, { specials: { bos: false } }),
      await ByteTokenizer.create(),
      await WordTokenizer.fromText(`${CATS} ${text}`, { maxVocab: 30, lowercase: false }),
    ];
    for (const t of tokenizers) {
      const json = JSON.stringify(t);
      for (const source of [json, t.toJSON(), JSON.parse(json) as TokenizerJSON]) {
        const back = await Tokenizer.fromJSON(source);
        expect(back.constructor).toBe(t.constructor);
        expect(JSON.stringify(back)).toBe(json);
        expect(back.vocabulary).toEqual(t.vocabulary);
        expect([back.size, back.padId, back.bosId, back.eosId, back.unkId]).toEqual([t.size, t.padId, t.bosId, t.eosId, t.unkId]);
        expect(await back.encode(text)).toEqual(await t.encode(text));
      }
    }
    // The escapes the core writes (quotes, backslash, tab, control characters) are the ones JSON.stringify writes.
    const charJson = JSON.stringify(tokenizers[0]);
    expect(charJson).toContain('"\\""');
    expect(charJson).toContain('"\\\\"');
    expect(charJson).toContain('"\\t"');
    expect(charJson).toContain('"\\u0001"');
    // The class factories check the kind.
    await expect(CharTokenizer.fromJSON(JSON.stringify(tokenizers[2]))).rejects.toThrow(
      /the JSON holds a word tokenizer, not a char one: use Tokenizer.fromJSON \(any kind\) or WordTokenizer.fromJSON/,
    );
    expect((await WordTokenizer.fromJSON(JSON.stringify(tokenizers[2]))).kind).toBe("word");
  });

  it("malformed, truncated or inconsistent JSON rejects naming the field", async () => {
    const good = JSON.stringify(await WordTokenizer.fromText(CATS, { maxVocab: 8 }));
    const special = '"special":{"pad":true,"bos":true,"eos":true,"unk":true}';
    const cases: [string, RegExp][] = [
      [good.slice(0, good.length >> 1), /tokenizer JSON: not valid JSON \(malformed or truncated\)/],
      ["[1, 2]", /the top level = \[1,2\] is not an object/],
      [`{"version":1,"kind":"foo",${special}}`, /field "kind" = "foo" is unknown: expected "char", "byte" or "word"/],
      [`{"version":2,"kind":"byte",${special}}`, /field "version" = 2 is unsupported: expected 1/],
      [`{"version":1,"kind":"byte",${special},"vocab":["a"]}`, /field "vocab" is unknown for kind "byte"/],
      [`{"version":1,"kind":"char",${special}}`, /field "vocab" is missing/],
      [`{"version":1,"kind":"word",${special},"lowercase":true,"vocab":["Cat"]}`, /"vocab\[0\]" = "Cat" has upper-case letters but "lowercase" is true/],
    ];
    for (const [json, message] of cases) await expect(Tokenizer.fromJSON(json)).rejects.toThrow(message);
    await expect(Tokenizer.fromJSON(42 as unknown as string)).rejects.toThrow(/json must be a tokenizer's JSON.*42 \(a number\)/);
  });
});

describe("bad input", () => {
  it("rejects naming the argument", async () => {
    const tok = await CharTokenizer.fromText("abc");
    await expect(CharTokenizer.fromText("")).rejects.toThrow(/text is empty/);
    await expect(CharTokenizer.fromText(7 as unknown as string)).rejects.toThrow(/text must be a string, got 7 \(a number\)/);
    await expect(CharTokenizer.fromText("ab", { specials: { pad: "yes" as unknown as boolean } })).rejects.toThrow(/options.specials.pad must be true or false/);
    // A lone surrogate has no UTF-8 form: refused, not merged with the next character or replaced.
    await expect(tok.encode("a\uD800b")).rejects.toThrow(/text has a lone surrogate U\+D800 at index 1: expected well-formed Unicode text/);
    await expect(CharTokenizer.fromText("ab\uDC00")).rejects.toThrow(/text has a lone surrogate U\+DC00 at index 2/);
    const bytes = await ByteTokenizer.create();
    await expect(bytes.encode("\uD83D")).rejects.toThrow(/lone surrogate/);
    expect((await bytes.encode("\uD83D\uDE00")).length).toBe(4);
    await expect(tok.decode([0, 99])).rejects.toThrow(/token id 99 at position 1 is out of range: expected \[0, 7\)/);
    await expect(tok.decode([0, 1.5])).rejects.toThrow(/ids\[1\] must be an integer, got 1.5/);
    await expect(tok.decode("ab" as unknown as number[])).rejects.toThrow(/ids must be an Int32Array or an array of integers/);
    await expect(tok.encode("a", { bos: 1 as unknown as boolean })).rejects.toThrow(/options.bos must be true or false, got 1/);
    expect(await tok.decode(await tok.encode("cab"))).toBe("cab");
  });
});
