// Tokenizers: text <-> token ids, built, run and serialised by the core (qkv/tokenizer.h), so that the
// vocabulary rules and the JSON format have one implementation: a tokenizer made by the native `qkv train`
// tool decodes here, and one made here is the same JSON byte for byte.
//
// A tokenizer is a value: it holds its JSON and no wasm memory, so it needs no dispose(). It crosses to the core
// once: the core keeps a few parsed under each tokenizer's key, and encode/decode send the key alone while that
// core holds it (GPT-2's tokenizer.json is over a megabyte: it must not cross a Worker's postMessage with every
// call). When the core has dropped it from its cache, or a crashed core was replaced, the call goes again with
// the JSON.

import type { Backend } from "./platform.js";
import { UNKNOWN_TOKENIZER, type Calls, type TokenizerIn, type TokenizerOut } from "./protocol.js";
import { backend } from "./runtime.js";
import { checkpointMetadata } from "./checkpoint.js";
import { boolean, bytes, checkOptions, describe, int32Like, object, positiveInt, string, text as wellFormed } from "./validate.js";

/** Which special tokens a tokenizer has (each default `true`). Ids: pad, bos, eos, unk first, in that order. */
export interface SpecialTokenOptions {
  /** `<pad>`: padding (id 0 when present, the models' default `padId`). */
  pad?: boolean;
  /** `<bos>`: beginning of sequence. */
  bos?: boolean;
  /** `<eos>`: end of sequence. */
  eos?: boolean;
  /** `<unk>`: what text outside the vocabulary encodes to. Without it, such text is an error. */
  unk?: boolean;
}

/** The JSON form of a tokenizer, as the core writes it (`Tokenizer::to_json`). */
export interface TokenizerJSON {
  version: 1;
  kind: "char" | "byte" | "word";
  special: { pad: boolean; bos: boolean; eos: boolean; unk: boolean };
  /** Word tokenizers only: whether ASCII letters are lower-cased. */
  lowercase?: boolean;
  /** Char and word tokenizers: the non-special tokens in id order. */
  vocab?: string[];
}

/**
 * A Hugging Face `tokenizer.json` (byte-level BPE: model type `"BPE"`), the JSON form of a
 * {@link BpeTokenizer}. Only the fields qkv reads are typed.
 */
export interface HfTokenizerJSON {
  model: { type: "BPE"; vocab: Record<string, number>; merges: (string | [string, string])[]; [k: string]: unknown };
  added_tokens?: { id: number; content: string; special?: boolean; lstrip?: boolean; rstrip?: boolean }[];
  pre_tokenizer?: unknown;
  decoder?: unknown;
  [k: string]: unknown;
}

/** Options of `encode`. */
export interface EncodeOptions {
  /** Put the bos token first (the tokenizer must have one). */
  bos?: boolean;
  /** Put the eos token last (the tokenizer must have one). */
  eos?: boolean;
  /**
   * {@link BpeTokenizer} only: encode special tokens found in the text (`<|endoftext|>`) as plain text
   * rather than as their ids (default false: they are matched, as Hugging Face's tokenizers do). The other
   * kinds never match special tokens in text.
   */
  splitSpecial?: boolean;
}

/** Options of `decode`. */
export interface DecodeOptions {
  /**
   * Drop the special tokens (default true): pad, bos and eos for the char and word tokenizers, whose unk always
   * decodes to `<unk>`; every added token marked special for a BPE, whose other tokens (unk included, when not
   * special) decode to their own text.
   */
  skipSpecial?: boolean;
}

/** Any of the four tokenizer classes. */
export type AnyTokenizer = CharTokenizer | ByteTokenizer | WordTokenizer | BpeTokenizer;

/**
 * The core's JSON of a tokenizer made by this package, or undefined for any other value (a look-alike
 * object, another copy of the package's class): what `save({ tokenizer })` stores. Not part of the public
 * API (index.ts does not export it).
 */
export let tokenizerJSON: (t: unknown) => string | undefined;

const utf8 = new TextDecoder();

function specials(options: unknown): { pad: boolean; bos: boolean; eos: boolean; unk: boolean } {
  if (options === undefined) return { pad: true, bos: true, eos: true, unk: true };
  const o = checkOptions("options.specials", options, "{ pad?, bos?, eos?, unk? }", "special-token");
  const flag = (k: "pad" | "bos" | "eos" | "unk") => (o[k] === undefined ? true : boolean(`options.specials.${k}`, o[k]));
  return { pad: flag("pad"), bos: flag("bos"), eos: flag("eos"), unk: flag("unk") };
}

/** Keys of this copy of the package: a counter after a random prefix, so that two copies sharing a core never collide. */
const KEY_PREFIX = `tok-${Math.random().toString(36).slice(2, 10)}-`;
let keys = 0;

async function build(source: TokenizerIn): Promise<[Backend, TokenizerOut]> {
  const b = await backend();
  // The core holds what it builds under a new key: the first encode need not send the JSON.
  return [b, await b.call("tokenizer", { ...source, key: KEY_PREFIX + ++keys })];
}

/** The constructors of the three classes (protected: each registers its own in a static block). */
const makers: { [K in TokenizerOut["kind"]]?: (b: Backend, out: TokenizerOut) => AnyTokenizer } = {};

function make(b: Backend, out: TokenizerOut): AnyTokenizer {
  const m = makers[out.kind];
  if (!m) throw new Error(`qkv: no tokenizer class for kind ${out.kind}; please report this`);
  return m(b, out);
}

function jsonText(json: unknown): string {
  // A whole tokenizer.json object is stringified here: the core parses (and validates) it.
  if (typeof json === "string") return wellFormed("json", json);
  if (typeof json === "object" && json !== null) return JSON.stringify(json);
  throw new TypeError(`json must be a tokenizer's JSON (a string or the object toJSON() returns), got ${describe(json)}`);
}

/**
 * The base of {@link CharTokenizer}, {@link ByteTokenizer} and {@link WordTokenizer}. Ids: the enabled
 * special tokens first (pad, bos, eos, unk), then the vocabulary in order.
 */
export abstract class Tokenizer {
  /** `"char"`, `"byte"`, `"word"` or `"bpe"`. */
  readonly kind: "char" | "byte" | "word" | "bpe";
  /** Number of token ids, specials included: the model's `vocabSize`. */
  readonly size: number;
  /** Id of `<pad>`, or undefined when the tokenizer has none. */
  readonly padId: number | undefined;
  /** Id of `<bos>`, or undefined. */
  readonly bosId: number | undefined;
  /** Id of `<eos>`, or undefined. */
  readonly eosId: number | undefined;
  /** Id of `<unk>`, or undefined. */
  readonly unkId: number | undefined;
  /**
   * Every token's text in id order, specials as `"<pad>"` etc. For a byte tokenizer the byte tokens are
   * one character each, U+0000 to U+00FF (the byte's value).
   */
  readonly vocabulary: readonly string[];
  /** The backend this tokenizer's calls go to (replaced when it has failed: a new core after a crash). */
  #backend: Backend;
  readonly #json: string;
  /** The key the core holds this tokenizer under. */
  readonly #key: string;
  /** The backend that holds #key as far as this object knows (an earlier call sent it the JSON), if any. */
  #holder: Backend | undefined;

  static {
    // The private field, not toJSON(): the exact string the core wrote, whatever a subclass overrides.
    tokenizerJSON = (t) => (typeof t === "object" && t !== null && #json in t ? t.#json : undefined);
  }

  /** @internal Use a factory: `CharTokenizer.fromText`, `ByteTokenizer.create`, `WordTokenizer.fromText`, `fromJSON`. */
  protected constructor(b: Backend, out: TokenizerOut) {
    this.#backend = b;
    this.#json = out.json;
    this.#key = out.key ?? KEY_PREFIX + ++keys;
    this.#holder = out.key === undefined ? undefined : b;
    this.kind = out.kind;
    this.size = out.size;
    const id = (i: number) => (i < 0 ? undefined : i);
    this.padId = id(out.padId);
    this.bosId = id(out.bosId);
    this.eosId = id(out.eosId);
    this.unkId = id(out.unkId);
    const firstWord = [out.padId, out.bosId, out.eosId, out.unkId].filter((i) => i >= 0).length;
    this.vocabulary = Object.freeze(
      out.vocabulary.map((b, i) => (out.kind === "byte" && i >= firstWord ? String.fromCharCode(b[0]!) : utf8.decode(b))),
    );
  }

  /**
   * A tokenizer from its JSON (a string, e.g. a checkpoint's `qkv.tokenizer` metadata, or the object
   * {@link Tokenizer.toJSON} returns), of whichever kind it says; a Hugging Face `tokenizer.json` gives a
   * {@link BpeTokenizer}. Rejects naming the field for malformed, truncated or inconsistent JSON, and for
   * what is not implemented (a `"WordPiece"` model, a normalizer, ...).
   */
  static async fromJSON(json: string | TokenizerJSON | HfTokenizerJSON): Promise<AnyTokenizer> {
    return make(...(await build({ kind: "json", json: jsonText(json) })));
  }

  /**
   * The tokenizer stored in a checkpoint's metadata by the `qkv train` tool: `key` is `"qkv.tokenizer"`
   * (the default; the source side of a seq2seq) or `"qkv.tokenizer.target"`.
   */
  static async fromCheckpoint(checkpoint: Uint8Array | ArrayBuffer, key = "qkv.tokenizer"): Promise<AnyTokenizer> {
    const meta = await checkpointMetadata(checkpoint);
    const json = Object.hasOwn(meta, string("key", key)) ? meta[key] : undefined;
    if (json === undefined) {
      throw new Error(`the checkpoint has no "${key}" metadata (it holds: ${Object.keys(meta).join(", ") || "none"})`);
    }
    return Tokenizer.fromJSON(json);
  }

  /**
   * Text to token ids. Text outside the vocabulary encodes to `<unk>`, or rejects naming the character
   * when there is no unk token. Char and word tokenizers need well-formed text (no lone surrogates).
   */
  async encode(text: string, options: EncodeOptions = {}): Promise<Int32Array> {
    return this.encodeAny(wellFormed("text", text), options);
  }

  /** Token ids to text. Rejects on an id outside `[0, size)`. */
  async decode(ids: Int32Array | readonly number[], options: DecodeOptions = {}): Promise<string> {
    return utf8.decode(await this.decodeAny(ids, options));
  }

  /**
   * The JSON form the core writes, as an object: {@link Tokenizer.fromJSON} reads `JSON.stringify(tokenizer)` back
   * to the same tokenizer. (The string itself can differ from the one the native build stores in a checkpoint's
   * `qkv.tokenizer` metadata: a JavaScript object lists integer-like keys, e.g. in a BPE `vocab`, first.)
   */
  toJSON(): TokenizerJSON | HfTokenizerJSON {
    return JSON.parse(this.#json) as TokenizerJSON | HfTokenizerJSON;
  }

  /** @internal */
  protected async encodeAny(text: string | Uint8Array, options: EncodeOptions): Promise<Int32Array> {
    const o = checkOptions("options", options, "{ bos?, eos?, splitSpecial? }", "encode");
    const bos = o.bos === undefined ? false : boolean("options.bos", o.bos);
    const eos = o.eos === undefined ? false : boolean("options.eos", o.eos);
    const splitSpecial = o.splitSpecial === undefined ? false : boolean("options.splitSpecial", o.splitSpecial);
    return (await this.#call("encode", { text, bos, eos, splitSpecial })).ids;
  }

  /** @internal */
  protected async decodeAny(ids: unknown, options: DecodeOptions): Promise<Uint8Array> {
    const i = int32Like("ids", ids);
    const o = checkOptions("options", options, "{ skipSpecial? }", "decode");
    const skipSpecial = o.skipSpecial === undefined ? true : boolean("options.skipSpecial", o.skipSpecial);
    return (await this.#call("decode", { ids: i, skipSpecial })).bytes;
  }

  /**
   * An encode or decode naming this tokenizer by its key, with its JSON only when the backend may not hold it
   * yet; sent again with the JSON when the core answers that it does not (its cache of a few dropped it).
   */
  async #call<K extends "encode" | "decode">(
    type: K,
    input: Omit<Calls[K]["in"], "tokenizer">,
  ): Promise<Calls[K]["out"]> {
    // A tokenizer outlives a crashed core (it holds nothing there): its calls go to the core that replaced it.
    if (this.#backend.failed()) this.#backend = await backend();
    const b = this.#backend;
    const send = (withJson: boolean) =>
      b.call(type, { ...input, tokenizer: withJson ? { key: this.#key, json: this.#json } : { key: this.#key } } as Calls[K]["in"]);
    // Calls reach the core in the order they are made, so the ones after this first one find it there.
    const held = this.#holder === b;
    this.#holder = b;
    try {
      return await send(!held);
    } catch (e) {
      if (!held || !(e instanceof Error && e.name === UNKNOWN_TOKENIZER)) throw e;
      return send(true);
    }
  }
}

/**
 * One token per Unicode code point (nanoGPT's char-level Shakespeare): the vocabulary is the distinct
 * characters of a training text, sorted by code point, after the special tokens.
 */
export class CharTokenizer extends Tokenizer {
  declare readonly kind: "char";
  /** Builds the vocabulary of every distinct character of `text` (well-formed, non-empty). */
  static async fromText(text: string, options: { specials?: SpecialTokenOptions } = {}): Promise<CharTokenizer> {
    const o = checkOptions("options", options, "{ specials? }", "tokenizer");
    const [b, out] = await build({ kind: "char", text: wellFormed("text", text), specials: specials(o.specials) });
    return ofKind(make(b, out), "char");
  }

  /** A tokenizer with this exact vocabulary (ids: the specials, then `chars` in order). */
  static async fromVocabulary(chars: readonly string[], options: { specials?: SpecialTokenOptions } = {}): Promise<CharTokenizer> {
    const o = checkOptions("options", options, "{ specials? }", "tokenizer");
    if (!Array.isArray(chars)) throw new TypeError(`chars must be an array of single characters, got ${describe(chars)}`);
    const json: TokenizerJSON = { version: 1, kind: "char", special: specials(o.specials), vocab: [...chars] };
    return CharTokenizer.fromJSON(json);
  }

  /** A char tokenizer from its JSON; rejects JSON of another kind. */
  static override async fromJSON(json: string | TokenizerJSON | HfTokenizerJSON): Promise<CharTokenizer> {
    return ofKind(await Tokenizer.fromJSON(json), "char");
  }

  static {
    makers.char = (b, out) => new CharTokenizer(b, out);
  }

  /** The core's JSON of this tokenizer (see {@link Tokenizer.toJSON}). */
  override toJSON(): TokenizerJSON {
    return super.toJSON() as TokenizerJSON;
  }

  /** @internal Use a factory. */
  protected constructor(b: Backend, out: TokenizerOut) {
    super(b, out);
  }
}

/** One token per byte value (256 after the specials): no training text, nothing is ever unknown. */
export class ByteTokenizer extends Tokenizer {
  declare readonly kind: "byte";
  /** The byte tokenizer with these special tokens (all four by default). */
  static async create(options: { specials?: SpecialTokenOptions } = {}): Promise<ByteTokenizer> {
    const o = checkOptions("options", options, "{ specials? }", "tokenizer");
    const [b, out] = await build({ kind: "byte", specials: specials(o.specials) });
    return ofKind(make(b, out), "byte");
  }

  /** A byte tokenizer from its JSON; rejects JSON of another kind. */
  static override async fromJSON(json: string | TokenizerJSON | HfTokenizerJSON): Promise<ByteTokenizer> {
    return ofKind(await Tokenizer.fromJSON(json), "byte");
  }

  static {
    makers.byte = (b, out) => new ByteTokenizer(b, out);
  }

  /** The core's JSON of this tokenizer (see {@link Tokenizer.toJSON}). */
  override toJSON(): TokenizerJSON {
    return super.toJSON() as TokenizerJSON;
  }

  /** @internal Use a factory. */
  protected constructor(b: Backend, out: TokenizerOut) {
    super(b, out);
  }

  /** Text (as its UTF-8 bytes) or raw bytes to token ids. */
  override async encode(text: string | Uint8Array, options: EncodeOptions = {}): Promise<Int32Array> {
    if (typeof text === "string") return this.encodeAny(wellFormed("text", text), options);
    return this.encodeAny(bytes("text", text), options);
  }

  /** Token ids to raw bytes (what {@link Tokenizer.decode} reads as UTF-8, replacing invalid sequences with U+FFFD). */
  async decodeBytes(ids: Int32Array | readonly number[], options: DecodeOptions = {}): Promise<Uint8Array> {
    return this.decodeAny(ids, options);
  }
}

/**
 * Whitespace-separated words, each ASCII punctuation character a token of its own, ASCII letters
 * lower-cased by default; the vocabulary keeps the most frequent words of a training text (ties in
 * byte order) and the rest encode to `<unk>`. Decoding joins words with single spaces, without one before
 * closing punctuation or after an opening bracket.
 */
export class WordTokenizer extends Tokenizer {
  declare readonly kind: "word";
  /** Whether ASCII letters are lower-cased before lookup. */
  readonly lowercase: boolean;

  /** Builds the vocabulary of the most frequent words of `text`, `maxVocab` tokens at most (specials included). */
  static async fromText(
    text: string,
    options: { maxVocab: number; specials?: SpecialTokenOptions; lowercase?: boolean },
  ): Promise<WordTokenizer> {
    const o = checkOptions("options", options, "{ maxVocab, specials?, lowercase? }", "WordTokenizer.fromText");
    const [b, out] = await build({
      kind: "word",
      text: wellFormed("text", text),
      maxVocab: positiveInt("options.maxVocab", o.maxVocab),
      specials: specials(o.specials),
      lowercase: o.lowercase === undefined ? true : boolean("options.lowercase", o.lowercase),
    });
    return ofKind(make(b, out), "word");
  }

  /** A word tokenizer from its JSON; rejects JSON of another kind. */
  static override async fromJSON(json: string | TokenizerJSON | HfTokenizerJSON): Promise<WordTokenizer> {
    return ofKind(await Tokenizer.fromJSON(json), "word");
  }

  static {
    makers.word = (b, out) => new WordTokenizer(b, out);
  }

  /** The core's JSON of this tokenizer (see {@link Tokenizer.toJSON}). */
  override toJSON(): TokenizerJSON {
    return super.toJSON() as TokenizerJSON;
  }

  /** @internal Use a factory. */
  protected constructor(b: Backend, out: TokenizerOut) {
    super(b, out);
    this.lowercase = out.lowercase;
  }
}

/**
 * Byte-level BPE, GPT-2's, id for id what Hugging Face's tokenizers give (the core's `qkv/tokenizer.h`, one
 * implementation for native, wasm and this package): from a `tokenizer.json`, from GPT-2's older
 * `vocab.json` + `merges.txt`, or trained on text. Special tokens (`<|endoftext|>`) in the text are matched
 * unless `encode(text, { splitSpecial: true })`; `bosId` and `eosId` are `<|endoftext|>`'s id when it is
 * special. Decoding reads the tokens' bytes as UTF-8 with U+FFFD for each invalid sequence, as Hugging Face's
 * ByteLevel decoder does; `skipSpecial` (default true) drops the special tokens.
 * Its JSON ({@link Tokenizer.toJSON}, what `save({ tokenizer })` stores) is a Hugging Face `tokenizer.json`.
 */
export class BpeTokenizer extends Tokenizer {
  declare readonly kind: "bpe";

  /** A BPE tokenizer from a Hugging Face `tokenizer.json` (its text or the parsed object). */
  static override async fromJSON(json: string | TokenizerJSON | HfTokenizerJSON): Promise<BpeTokenizer> {
    return ofKind(await Tokenizer.fromJSON(json), "bpe");
  }

  /**
   * GPT-2's older files: `vocab.json` (`{ token: id }`) and `merges.txt` (a `#version` line, then `a b` per
   * line), as text. `<|endoftext|>`, when in the vocabulary, is a special token.
   */
  static async fromVocabMerges(vocabJson: string, mergesTxt: string): Promise<BpeTokenizer> {
    const [b, out] = await build({ kind: "vocabMerges", vocab: wellFormed("vocabJson", vocabJson), merges: wellFormed("mergesTxt", mergesTxt) });
    return ofKind(make(b, out), "bpe");
  }

  /**
   * Trains a byte-level BPE on `text`, deterministically, up to `vocabSize` tokens (the special tokens and the
   * 256 bytes included; fewer when the text runs out of pairs): each merge is the most frequent adjacent pair,
   * ties to the lower token ids. `specialTokens` (default `["<|endoftext|>"]`) get ids 0, 1, ... and are cut
   * out of the text; `addPrefixSpace` (default false) is the pre-tokenizer's option.
   */
  static async train(
    text: string,
    options: { vocabSize: number; specialTokens?: readonly string[]; addPrefixSpace?: boolean },
  ): Promise<BpeTokenizer> {
    const o = checkOptions("options", options, "{ vocabSize, specialTokens?, addPrefixSpace? }", "BpeTokenizer.train");
    const special = o.specialTokens === undefined ? ["<|endoftext|>"] : o.specialTokens;
    if (!Array.isArray(special) || !special.every((s) => typeof s === "string")) {
      throw new TypeError(`options.specialTokens must be an array of strings, got ${describe(special)}`);
    }
    const [b, out] = await build({
      kind: "bpe",
      text: wellFormed("text", text),
      vocabSize: positiveInt("options.vocabSize", o.vocabSize),
      specialTokens: special.map((s, i) => wellFormed(`options.specialTokens[${i}]`, s)),
      addPrefixSpace: o.addPrefixSpace === undefined ? false : boolean("options.addPrefixSpace", o.addPrefixSpace),
    });
    return ofKind(make(b, out), "bpe");
  }

  static {
    makers.bpe = (b, out) => new BpeTokenizer(b, out);
  }

  /** @internal Use a factory. */
  protected constructor(b: Backend, out: TokenizerOut) {
    super(b, out);
  }

  /** The Hugging Face `tokenizer.json` of this tokenizer: Hugging Face's libraries load it as it is. */
  override toJSON(): HfTokenizerJSON {
    return super.toJSON() as HfTokenizerJSON;
  }
}

const CLASS_OF = { char: "CharTokenizer", byte: "ByteTokenizer", word: "WordTokenizer", bpe: "BpeTokenizer" } as const;

/** `t` as the class of `kind`, or an error naming the kind it has. */
function ofKind<K extends Tokenizer["kind"]>(t: AnyTokenizer, kind: K): Extract<AnyTokenizer, { kind: K }> {
  if (t.kind !== kind) {
    throw new Error(
      `the JSON holds a ${t.kind} tokenizer, not a ${kind} one: use Tokenizer.fromJSON (any kind) or ${CLASS_OF[t.kind]}.fromJSON`,
    );
  }
  return t as Extract<AnyTokenizer, { kind: K }>;
}
