// Token streaming in Node (the core on the caller's thread): generate({ onToken }) and stream() hand over each
// token as it is made, give exactly generate()'s tokens, stop the core when the loop ends early, and leave
// the model usable after a throwing callback, an early break or calls made between two tokens.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, init, LanguageModel, type GenerateOptions } from "../../web/dist/node.js";
import { PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

await init({ threads: 2 });
const NO_SPECIALS = { specials: { pad: false, bos: false, eos: false, unk: false } };
const tok = await CharTokenizer.fromText(PATTERN_TEXT, NO_SPECIALS);
const data = await tok.encode(PATTERN_TEXT);
const CONTEXT = 16;

let model: LanguageModel;
let prompt: Int32Array;
const GREEDY = { maxTokens: 40, temperature: 0 } satisfies GenerateOptions; // 40 > context: the window slides
const SAMPLED = { maxTokens: 40, temperature: 0.9, topK: 8, topP: 0.95, repetitionPenalty: 1.1, seed: 11 } satisfies GenerateOptions;

beforeAll(async () => {
  model = await LanguageModel.create({ vocabSize: tok.size, context: CONTEXT, dModel: 32, heads: 4, layers: 2, lr: 1e-2, seed: 5 });
  // A little training, so that greedy and sampled text differ and are not one repeated id.
  const random = rng(3);
  for (let i = 0; i < 30; i++) {
    const { inputs, targets } = sampleBatch(data, 4, CONTEXT, random);
    await model.trainStep(inputs, targets, { batch: 4, seq: CONTEXT });
  }
  prompt = await tok.encode("the quick ");
});
afterAll(() => model?.dispose());

/** Every token of a stream() loop. */
async function collect(tokens: AsyncIterable<number>): Promise<number[]> {
  const out: number[] = [];
  for await (const t of tokens) out.push(t);
  return out;
}

describe("generate({ onToken }) and stream() give generate()'s tokens", () => {
  for (const [name, options] of [
    ["greedy", GREEDY],
    ["sampled", SAMPLED],
    ["sampled without the KV cache", { ...SAMPLED, useCache: false }],
  ] as const) {
    it(name, async () => {
      const expected = Array.from(await model.generate(prompt, options));
      expect(expected).toHaveLength(40);
      if (name !== "greedy") expect(expected).not.toEqual(Array.from(await model.generate(prompt, GREEDY)));
      const seen: [number, number][] = [];
      const resolved = await model.generate(prompt, { ...options, onToken: (t, i) => seen.push([t, i]) });
      expect(resolved).toBeInstanceOf(Int32Array);
      expect(Array.from(resolved)).toEqual(expected);
      expect(seen).toEqual(expected.map((t, i) => [t, i]));
      expect(await collect(model.stream(prompt, options))).toEqual(expected);
    });
  }

  it("a stop token ends both where generate() ends", async () => {
    const full = Array.from(await model.generate(prompt, SAMPLED));
    const options = { ...SAMPLED, stopTokens: [full[5]!] };
    const expected = Array.from(await model.generate(prompt, options));
    expect(expected.length).toBeLessThanOrEqual(6);
    expect(expected.at(-1)).toBe(full[5]);
    const seen: number[] = [];
    expect(Array.from(await model.generate(prompt, { ...options, onToken: (t) => seen.push(t) }))).toEqual(expected);
    expect(seen).toEqual(expected);
    expect(await collect(model.stream(prompt, options))).toEqual(expected);
  });
});

describe("tokens arrive as they are made", () => {
  it("onToken is called for every token before the promise resolves, never inside the generate() call", async () => {
    const events: string[] = [];
    const pending = model.generate(prompt, { ...GREEDY, maxTokens: 5, onToken: (_t, i) => events.push(`token ${i}`) });
    events.push("returned");
    const tokens = await pending.then((r) => {
      events.push("resolved");
      return r;
    });
    expect(tokens).toHaveLength(5);
    expect(events).toEqual(["returned", "token 0", "token 1", "token 2", "token 3", "token 4", "resolved"]);
  });

  it("stream(): the loop gets each token before the core makes the next one", async () => {
    const events: string[] = [];
    // onToken runs as the core hands a token over; the loop body as the consumer gets it.
    for await (const t of model.stream(prompt, { ...SAMPLED, maxTokens: 4, onToken: (t) => events.push(`made ${t}`) })) {
      events.push(`got ${t}`);
    }
    const tokens = Array.from(await model.generate(prompt, { ...SAMPLED, maxTokens: 4 }));
    expect(events).toEqual(tokens.flatMap((t) => [`made ${t}`, `got ${t}`]));
  });

  it("the event loop runs between two tokens (a timer fires during a long generation)", async () => {
    let made = 0;
    let madeWhenTimerFired = -1;
    const timer = new Promise<void>((resolve) =>
      setTimeout(() => {
        madeWhenTimerFired = made;
        resolve();
      }, 1),
    );
    const tokens = await model.generate(prompt, { maxTokens: 400, temperature: 0.9, seed: 2, onToken: () => made++ });
    await timer;
    expect(tokens).toHaveLength(400);
    expect(madeWhenTimerFired).toBeGreaterThanOrEqual(0);
    expect(madeWhenTimerFired).toBeLessThan(400);
  });
});

describe("ending early", () => {
  it("break after 3 tokens stops the core at once; the model then generates and trains as before", async () => {
    const before = Array.from(await model.generate(prompt, SAMPLED));
    let made = 0;
    const got: number[] = [];
    const start = performance.now();
    // Ten million tokens would take hours: only a core that stops makes this loop end.
    for await (const t of model.stream(prompt, { ...SAMPLED, maxTokens: 10_000_000, onToken: () => made++ })) {
      got.push(t);
      if (got.length === 3) break;
    }
    const ms = performance.now() - start;
    expect(got).toEqual(before.slice(0, 3)); // the same seed: the same first tokens
    expect(made).toBe(3);
    expect(ms).toBeLessThan(5_000);
    expect(Array.from(await model.generate(prompt, SAMPLED))).toEqual(before);
    expect(await collect(model.stream(prompt, SAMPLED))).toEqual(before);
    const { inputs, targets } = sampleBatch(data, 2, CONTEXT, rng(9));
    expect(Number.isFinite((await model.trainStep(inputs, targets, { batch: 2, seq: CONTEXT })).loss)).toBe(true);
  });

  it("an iterator's return() ends it too, and an abandoned stream() that was never started runs nothing", async () => {
    const before = Array.from(await model.generate(prompt, GREEDY));
    const it = model.stream(prompt, { ...GREEDY, maxTokens: 10_000_000 })[Symbol.asyncIterator]();
    expect((await it.next()).value).toBe(before[0]);
    expect(await it.return(undefined)).toEqual({ done: true, value: undefined });
    expect(await it.next()).toEqual({ done: true, value: undefined });
    model.stream(prompt, { ...GREEDY, maxTokens: 10_000_000 }); // an async generator runs nothing until next()
    expect(Array.from(await model.generate(prompt, GREEDY))).toEqual(before);
  });

  it("a throwing onToken rejects generate() with its error, stops the core, and leaves the model usable", async () => {
    const before = Array.from(await model.generate(prompt, SAMPLED));
    const error = new Error("the page closed");
    const seen: number[] = [];
    const rejected = model.generate(prompt, {
      ...SAMPLED,
      maxTokens: 10_000_000,
      onToken: (t, i) => {
        seen.push(t);
        if (i === 2) throw error;
      },
    });
    await expect(rejected).rejects.toBe(error);
    expect(seen).toEqual(before.slice(0, 3));
    expect(Array.from(await model.generate(prompt, SAMPLED))).toEqual(before);
    // The same in a stream() loop: the loop throws it.
    const got: number[] = [];
    await expect(
      (async () => {
        for await (const t of model.stream(prompt, { ...SAMPLED, onToken: (_t, i) => { if (i === 4) throw error; } })) got.push(t);
      })(),
    ).rejects.toBe(error);
    expect(got).toEqual(before.slice(0, 4));
    expect(await collect(model.stream(prompt, SAMPLED))).toEqual(before);
  });

  it("a throw in the loop body ends the stream and is the loop's error", async () => {
    const error = new RangeError("stop");
    let made = 0;
    await expect(
      (async () => {
        for await (const _ of model.stream(prompt, { ...GREEDY, maxTokens: 10_000_000, onToken: () => made++ })) throw error;
      })(),
    ).rejects.toBe(error);
    expect(made).toBe(1);
  });
});

describe("other calls while a stream runs", () => {
  it("a call on the model made during the stream waits for its end, as behind generate(); its tokens stay generate()'s", async () => {
    const m = await LanguageModel.create({ vocabSize: tok.size, context: CONTEXT, dModel: 16, heads: 2, layers: 1, lr: 0.05 });
    const expected = Array.from(await m.generate(prompt, SAMPLED));
    const events: string[] = [];
    let trained: Promise<unknown> | undefined;
    const { inputs, targets } = sampleBatch(data, 2, CONTEXT, rng(4));
    for await (const t of m.stream(prompt, SAMPLED)) {
      events.push(String(t));
      // Not awaited: a training step in the middle would change the rest of the tokens if it ran now.
      if (events.length === 5) trained = m.trainStep(inputs, targets, { batch: 2, seq: CONTEXT }).then(() => events.push("trained"));
    }
    await trained;
    expect(events).toEqual([...expected.map(String), "trained"]);
    expect(Array.from(await m.generate(prompt, SAMPLED))).not.toEqual(expected); // the step did run, after
    m.dispose();
  });

  it("awaiting such a call inside the loop gets it after the last token, then the loop goes on with every token", async () => {
    const expected = Array.from(await model.generate(prompt, SAMPLED));
    const other = await tok.encode("lazy dog");
    const otherExpected = Array.from(await model.generate(other, GREEDY));
    let made = 0;
    const got: number[] = [];
    let madeWhenPredicted = -1;
    let otherGot: number[] = [];
    for await (const t of model.stream(prompt, { ...SAMPLED, onToken: () => made++ })) {
      got.push(t);
      if (got.length === 5) {
        expect((await model.predict(other)).length).toBe(other.length * tok.size);
        madeWhenPredicted = made;
        otherGot = await collect(model.stream(other, GREEDY));
      }
    }
    expect(madeWhenPredicted).toBe(40);
    expect(got).toEqual(expected);
    expect(otherGot).toEqual(otherExpected);
  });

  it("another model's calls run between two tokens", async () => {
    const m2 = await LanguageModel.create({ vocabSize: tok.size, context: CONTEXT, dModel: 16, heads: 2, layers: 1 });
    const otherExpected = Array.from(await m2.generate(prompt, GREEDY));
    let made = 0;
    let madeWhenPredicted = -1;
    let otherGot: number[] = [];
    for await (const _ of model.stream(prompt, { ...SAMPLED, onToken: () => made++ })) {
      if (made === 3) {
        await m2.predict(prompt);
        madeWhenPredicted = made;
        otherGot = await collect(m2.stream(prompt, GREEDY)); // two streams at once, on two models
      }
    }
    expect(madeWhenPredicted).toBeGreaterThanOrEqual(3);
    expect(madeWhenPredicted).toBeLessThan(40);
    expect(otherGot).toEqual(otherExpected);
    m2.dispose();
  });

  it("dispose() during a stream ends it with an Error saying so", async () => {
    const m = await LanguageModel.create({ vocabSize: tok.size, context: CONTEXT, dModel: 16, heads: 2, layers: 1 });
    const got: number[] = [];
    await expect(
      (async () => {
        for await (const t of m.stream(prompt, { maxTokens: 10_000_000 })) {
          got.push(t);
          if (got.length === 2) m.dispose();
        }
      })(),
    ).rejects.toThrow(/disposed during generation/);
    expect(got).toHaveLength(2);
    await expect(collect(m.stream(prompt, { maxTokens: 2 }))).rejects.toThrow(/stream\(\) was called after dispose\(\)/);
  });
});

describe("bad options", () => {
  it("onToken that is not a function is a TypeError naming options.onToken", async () => {
    for (const bad of [5, "f", {}, null]) {
      const opts = { maxTokens: 3, onToken: bad } as unknown as GenerateOptions;
      const e = await model.generate(prompt, opts).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(TypeError);
      expect((e as Error).message).toMatch(/^options\.onToken must be a function \(token, index\) => void, got /);
      await expect(collect(model.stream(prompt, opts))).rejects.toThrow(TypeError);
    }
    await expect(collect(model.stream(prompt, { maxTokens: 3, onToken: 5 } as unknown as GenerateOptions))).rejects.toThrow(
      /options\.onToken must be a function \(token, index\) => void, got 5 \(a number\)/,
    );
  });

  it("stream() checks its options and prompt as generate() does, when the loop starts", async () => {
    await expect(collect(model.stream(prompt, { maxTokens: 0 }))).rejects.toThrow(/options.maxTokens must be a positive integer/);
    await expect(collect(model.stream(prompt, { maxTokens: 3, topP: 0 }))).rejects.toThrow(/top_p = 0 is invalid/);
    await expect(collect(model.stream(Int32Array.of(1, tok.size), { maxTokens: 3 }))).rejects.toThrow(/prompt\[1\] = \d+ is out of range/);
    await expect(collect(model.stream("ab" as unknown as Int32Array, { maxTokens: 3 }))).rejects.toThrow(TypeError);
    expect(Array.from(await model.generate(prompt, { maxTokens: 3, temperature: 0 }))).toEqual(
      Array.from(await model.generate(prompt, GREEDY)).slice(0, 3),
    );
  });
});
