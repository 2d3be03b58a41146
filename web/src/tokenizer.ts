/**
 * A character-level tokenizer: one token id per Unicode code point seen in the training text,
 * ids assigned in sorted order (so the same text always gives the same vocabulary).
 */
export class CharTokenizer {
  private readonly ids: Map<string, number>;

  private constructor(private readonly chars: readonly string[]) {
    this.ids = new Map(chars.map((c, i) => [c, i]));
  }

  /** Builds the vocabulary of every distinct character of `text`. */
  static fromText(text: string): CharTokenizer {
    if (typeof text !== "string") throw new Error(`text must be a string, got ${typeof text}`);
    return new CharTokenizer([...new Set(Array.from(text))].sort());
  }

  /** Builds a tokenizer from an explicit vocabulary (ids are the positions in `chars`). */
  static fromVocabulary(chars: readonly string[]): CharTokenizer {
    const seen = new Set<string>();
    for (const [i, c] of chars.entries()) {
      if (typeof c !== "string" || Array.from(c).length !== 1) {
        throw new Error(`chars[${i}] must be a single character, got ${JSON.stringify(c)}`);
      }
      if (seen.has(c)) throw new Error(`chars[${i}] = ${JSON.stringify(c)} appears twice`);
      seen.add(c);
    }
    return new CharTokenizer([...chars]);
  }

  /** Number of token ids: the model's `vocabSize`. */
  get size(): number {
    return this.chars.length;
  }

  /** The characters, indexed by token id. */
  get vocabulary(): readonly string[] {
    return this.chars;
  }

  /** Text to token ids. Throws on a character that is not in the vocabulary. */
  encode(text: string): Int32Array {
    const cs = Array.from(text);
    const out = new Int32Array(cs.length);
    for (let i = 0; i < cs.length; i++) {
      const id = this.ids.get(cs[i]!);
      if (id === undefined) {
        const cp = cs[i]!.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0");
        throw new Error(`text[${i}] = ${JSON.stringify(cs[i])} (U+${cp}) is not in the tokenizer's vocabulary`);
      }
      out[i] = id;
    }
    return out;
  }

  /** Token ids to text. Throws on an id outside [0, size). */
  decode(ids: ArrayLike<number>): string {
    let s = "";
    for (let i = 0; i < ids.length; i++) {
      const c = this.chars[ids[i]!];
      if (c === undefined) throw new Error(`ids[${i}] = ${ids[i]} is out of range: expected a token id in [0, ${this.size})`);
      s += c;
    }
    return s;
  }
}
