// The npm package in Node against the real threaded .wasm: load, train, generate, and bad input.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CharTokenizer, init, LanguageModel, VERSION, type RuntimeInfo } from "../../web/dist/node.js";
import { EXPECT_RELAXED_SIMD, PATTERN, PATTERN_TEXT, rng, sampleBatch } from "./helpers.js";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

// The core first, with the threads the init test checks (a tokenizer factory would load it with defaults).
const info: RuntimeInfo = await init({ threads: 2 });
const NO_SPECIALS = { specials: { pad: false, bos: false, eos: false, unk: false } };
const tok = await CharTokenizer.fromText(PATTERN_TEXT, NO_SPECIALS);
const data = await tok.encode(PATTERN_TEXT);
const BATCH = 4;
const SEQ = 16;
const CONFIG = { vocabSize: tok.size, context: SEQ, dModel: 32, heads: 4, layers: 1, lr: 1e-2, seed: 7 };

let model: LanguageModel;
const random = rng(42);

beforeAll(async () => {
  model = await LanguageModel.create(CONFIG);
});
afterAll(() => model?.dispose());

/** One training step on a fresh random batch; the model must still train after whatever came before. */
async function stepWorks(m: LanguageModel = model): Promise<void> {
  const { inputs, targets } = sampleBatch(data, BATCH, SEQ, random);
  const { loss } = await m.trainStep(inputs, targets, { batch: BATCH, seq: SEQ });
  expect(Number.isFinite(loss)).toBe(true);
  expect(loss).toBeGreaterThan(0);
}

describe("init", () => {
  it("loads the threaded build with the requested threads and reports SIMD and version", () => {
    expect(info.threaded).toBe(true);
    expect(info.threads).toBe(2);
    expect(typeof info.simd).toBe("string");
    expect(info.simd.length).toBeGreaterThan(0);
    expect(info.relaxedSimd).toBe(EXPECT_RELAXED_SIMD);
    expect(info.version).toBe(VERSION);
    expect(VERSION).toBe(pkg.version);
  });

  it("called again, resolves to the running core, or refuses options it does not have", async () => {
    expect(await init()).toEqual(info);
    expect(await init({ threads: 2, threaded: true, backend: "wasm" })).toEqual(info);
    await expect(init({ threads: 1 })).rejects.toThrow(
      /qkv: init\(\) asked for threads 1 \(running: 2\), but the core already runs \(started by init\(\{ threads: 2 \}\)\)/,
    );
    await expect(init({ backend: "webgpu", threads: 1 })).rejects.toThrow(
      /asked for threads 1 \(running: 2\), backend "webgpu" \(running: "wasm"\), but .*dispose\(\) every model and start over/,
    );
    expect(await init()).toEqual(info); // the refusals changed nothing
  });
});

describe("LanguageModel", () => {
  it("counts its parameters", () => {
    // Embedding V*C + positions T*C + the final LayerNorm and head at least: a lower bound independent of biases.
    const { vocabSize: V, context: T, dModel: C } = CONFIG;
    expect(model.numParameters()).toBeGreaterThan(V * C + T * C + 12 * C * C);
    expect(model.config.dModel).toBe(32);
  });

  it("learns a repeating sentence: the loss falls below half its first value in 50 steps", async () => {
    const m = await LanguageModel.create({ ...CONFIG, seed: 11 });
    const train = rng(1);
    const losses: number[] = [];
    for (let step = 0; step < 50; step++) {
      const { inputs, targets } = sampleBatch(data, BATCH, SEQ, train);
      losses.push((await m.trainStep(inputs, targets, { batch: BATCH, seq: SEQ })).loss);
    }
    const first = losses[0]!;
    const last5 = losses.slice(-5).reduce((a, b) => a + b, 0) / 5;
    console.log(`loss: step 0 ${first.toFixed(3)}, mean of steps 45-49 ${last5.toFixed(3)} (ln V = ${Math.log(tok.size).toFixed(3)})`);
    // A fresh model predicts close to uniform: loss near ln(vocabSize).
    expect(Math.abs(first - Math.log(tok.size))).toBeLessThan(0.5);
    expect(last5).toBeLessThan(0.5 * first);

    // evaluate() gives a loss without training: the same batch twice gives the same loss.
    const { inputs, targets } = sampleBatch(data, BATCH, SEQ, train);
    const a = await m.evaluate(inputs, targets, { batch: BATCH, seq: SEQ });
    const b = await m.evaluate(inputs, targets, { batch: BATCH, seq: SEQ });
    expect(a.loss).toBe(b.loss);
    expect(a.loss).toBeLessThan(0.5 * first);
    m.dispose();
  });

  it("setLearningRate changes the step size: ~0 leaves the loss as it was, a large one lowers it", async () => {
    const m = await LanguageModel.create({ ...CONFIG, seed: 12, weightDecay: 0 });
    const { inputs, targets } = sampleBatch(data, BATCH, SEQ, rng(9));
    const before = (await m.evaluate(inputs, targets, { batch: BATCH })).loss;
    await m.setLearningRate(1e-12);
    await m.trainStep(inputs, targets, { batch: BATCH });
    const tiny = (await m.evaluate(inputs, targets, { batch: BATCH })).loss;
    expect(Math.abs(tiny - before)).toBeLessThan(1e-4);
    await m.setLearningRate(1e-2);
    for (let i = 0; i < 3; i++) await m.trainStep(inputs, targets, { batch: BATCH });
    const after = (await m.evaluate(inputs, targets, { batch: BATCH })).loss;
    expect(after).toBeLessThan(before - 0.1);
    await expect(m.setLearningRate(-1)).rejects.toThrow(/lr must be a finite number > 0, got -1/);
    if (typeof Symbol.dispose === "symbol") {
      m[Symbol.dispose]();
      expect(m.disposed).toBe(true);
    } else {
      m.dispose();
    }
  });

  it("derives the batch shape from the array length", async () => {
    const { inputs, targets } = sampleBatch(data, 2, SEQ, random);
    const a = await model.evaluate(inputs, targets, { batch: 2 });
    const b = await model.evaluate(inputs, targets, { seq: SEQ });
    expect(a.loss).toBe(b.loss);
  });

  it("generates exactly maxTokens ids in range, reproducibly for a seed", async () => {
    const prompt = await tok.encode("the quick ");
    const a = await model.generate(prompt, { maxTokens: 20, temperature: 0.8, seed: 3 });
    expect(a).toBeInstanceOf(Int32Array);
    expect(a.length).toBe(20);
    for (const id of a) expect(id >= 0 && id < tok.size).toBe(true);
    expect(await model.generate(prompt, { maxTokens: 20, temperature: 0.8, seed: 3 })).toEqual(a);
    expect(typeof (await tok.decode(a))).toBe("string");
  });

  it("generates from a one-token prompt past the attention's first key tile, on a model nothing planned before", async () => {
    // The attention's scratch grows with the keys a cached step sees (the cache's, not the one position it feeds);
    // planned for the fed positions alone, this refused once the cache held 16 keys.
    for (const heads of [1, 4]) {
      const fresh = await LanguageModel.create({ ...CONFIG, context: 64, heads });
      const prompt = Int32Array.of(3);
      const cached = await fresh.generate(prompt, { maxTokens: 50, temperature: 0 });
      expect(cached.length).toBe(50);
      expect(await fresh.generate(prompt, { maxTokens: 50, temperature: 0, useCache: false })).toEqual(cached);
      fresh.dispose();
    }
  });
});

/** The mean next-token cross-entropy of (B*T, V) logits against targets, in double. */
function crossEntropy(logits: Float32Array, targets: Int32Array, V: number): number {
  let sum = 0;
  for (let r = 0; r < targets.length; r++) {
    const row = logits.subarray(r * V, (r + 1) * V);
    const max = Math.max(...row);
    let z = 0;
    for (const v of row) z += Math.exp(v - max);
    sum += Math.log(z) + max - row[targets[r]!]!;
  }
  return sum / targets.length;
}

function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

describe("LanguageModel: predict, attention, generate options, save and load", () => {
  const V = tok.size;

  it("predict gives (batch, seq, vocabSize) logits whose cross-entropy is evaluate's loss", async () => {
    const { inputs, targets } = sampleBatch(data, 3, SEQ, rng(21));
    const logits = await model.predict(inputs, { batch: 3 });
    expect(logits).toBeInstanceOf(Float32Array);
    expect(logits.length).toBe(3 * SEQ * V);
    const m = await model.evaluate(inputs, targets, { batch: 3 });
    expect(Math.abs(crossEntropy(logits, targets, V) - m.loss)).toBeLessThan(1e-5);
    expect(m.count).toBe(3 * SEQ);
    expect(m.perplexity).toBeCloseTo(Math.exp(m.loss), 6);
    let correct = 0;
    for (let r = 0; r < targets.length; r++) if (argmax(logits.subarray(r * V, (r + 1) * V)) === targets[r]) correct++;
    expect(m.accuracy).toBeCloseTo(correct / targets.length, 9);
    // Rows are independent: the second row alone gives the same logits as within the batch.
    const alone = await model.predict(inputs.subarray(SEQ, 2 * SEQ));
    const within = logits.subarray(SEQ * V, 2 * SEQ * V);
    expect(Math.max(...alone.map((v, i) => Math.abs(v - within[i]!)))).toBeLessThan(1e-5);
  });

  it("attention gives one head's causal (seq, seq) map of the last forward, rows summing to 1", async () => {
    const { inputs } = sampleBatch(data, 2, SEQ, rng(22));
    await model.predict(inputs, { batch: 2 });
    const maps: Float32Array[] = [];
    for (const batchIndex of [0, 1]) {
      for (let head = 0; head < CONFIG.heads; head++) {
        const a = await model.attention({ layer: 0, head, batchIndex });
        expect(a.length).toBe(SEQ * SEQ);
        for (let i = 0; i < SEQ; i++) {
          let sum = 0;
          for (let j = 0; j < SEQ; j++) {
            const w = a[i * SEQ + j]!;
            if (j > i) expect(w).toBe(0); // causal: no attention to later positions
            sum += w;
          }
          expect(Math.abs(sum - 1)).toBeLessThan(1e-5);
        }
        maps.push(a);
      }
    }
    // Heads and rows differ (the slicing picks distinct maps).
    expect(maps[0]).not.toEqual(maps[1]);
    expect(maps[0]).not.toEqual(maps[CONFIG.heads]);
    await expect(model.attention({ layer: 0, head: CONFIG.heads })).rejects.toThrow(/head = 4 is out of range: expected 0 <= head < 4/);
    await expect(model.attention({ layer: 0, head: 0, batchIndex: 2 })).rejects.toThrow(/batchIndex = 2 is out of range/);
    await expect(model.attention({ layer: 1, head: 0 })).rejects.toThrow(/layer = 1 is out of range/);
    await model.generate(await tok.encode("the "), { maxTokens: 2, temperature: 0 });
    await expect(model.attention({ layer: 0, head: 0 })).rejects.toThrow(/call predict\(\) on the sequence first/);
  });

  it("generate: greedy follows predict's argmax, top-k 1 is greedy, stop tokens end early, options are checked", async () => {
    const prompt = await tok.encode("the quick brown");
    const greedy = await model.generate(prompt, { maxTokens: 6, temperature: 0 });
    // Greedy by hand: the argmax of the last position's logits, appended, repeated.
    const seq = Array.from(prompt);
    for (let i = 0; i < 6; i++) {
      const window = Int32Array.from(seq.slice(-SEQ));
      const logits = await model.predict(window);
      seq.push(argmax(logits.subarray((window.length - 1) * V, window.length * V)));
    }
    expect(Array.from(greedy)).toEqual(seq.slice(prompt.length));
    expect(await model.generate(prompt, { maxTokens: 6, temperature: 1.5, topK: 1, seed: 9 })).toEqual(greedy);
    // Without the KV cache: the same tokens, greedy and sampled.
    expect(await model.generate(prompt, { maxTokens: 6, temperature: 0, useCache: false })).toEqual(greedy);
    const sampled = { maxTokens: 20, temperature: 1, seed: 3 };
    expect(await model.generate(prompt, { ...sampled, useCache: false })).toEqual(await model.generate(prompt, sampled));
    await expect(model.generate(prompt, { maxTokens: 3, useCache: "no" as unknown as boolean })).rejects.toThrow(/options.useCache must be true or false/);
    // A stop token: generation ends right after emitting it.
    const stop = greedy[2]!;
    const stopped = await model.generate(prompt, { maxTokens: 6, temperature: 0, stopTokens: [stop] });
    expect(Array.from(stopped)).toEqual(Array.from(greedy.subarray(0, greedy.indexOf(stop) + 1)));
    // Sampling is a function of the seed; top-p and the repetition penalty are accepted and change nothing's type.
    const opts = { maxTokens: 12, temperature: 1, topP: 0.9, repetitionPenalty: 1.3, seed: 5 };
    const a = await model.generate(prompt, opts);
    expect(await model.generate(prompt, opts)).toEqual(a);
    await expect(model.generate(prompt, { maxTokens: 3, topP: 0 })).rejects.toThrow(/top_p = 0 is invalid/);
    // A negative top-k is refused quoting the value given (the core clamped it to -1 for its own message).
    await expect(model.generate(prompt, { maxTokens: 3, topK: -5 })).rejects.toThrow(/options\.topK must be an integer in \[0, 2147483647\], got -5/);
    await expect(model.generate(prompt, { maxTokens: 3, repetitionPenalty: 0 })).rejects.toThrow(/repetition_penalty = 0 is invalid/);
    await expect(model.generate(prompt, { maxTokens: 3, stopTokens: [V] })).rejects.toThrow(/stop_tokens\[0\] = \d+ is out of range/);
    await expect(model.generate(prompt, { maxTokens: 3, topK: 1.5 })).rejects.toThrow(/options\.topK must be an integer in \[0, 2147483647\], got 1\.5/);
    await expect(model.generate(prompt, { maxTokens: 3, stopTokens: ["a"] as unknown as number[] })).rejects.toThrow(/options.stopTokens\[0\] must be an integer/);
    // Any ArrayLike is taken, as the type says; a value past int32 is said to be one.
    expect(await model.generate(prompt, { maxTokens: 6, temperature: 0, stopTokens: { length: 1, 0: stop } })).toEqual(stopped);
    await expect(model.generate(prompt, { maxTokens: 3, stopTokens: Uint32Array.of(4294967295) })).rejects.toThrow(
      /options\.stopTokens\[0\] must be an integer from -2147483648 to 2147483647 \(an int32\), got 4294967295/,
    );
    await expect(model.generate(prompt, { maxTokens: 3, topk: 2 } as unknown as { maxTokens: number })).rejects.toThrow(/options.topk is not a generate option/);
  });

  it("generate and stream end when their signal aborts, rejecting with its reason; the model goes on", async () => {
    const prompt = await tok.encode("the quick brown");
    const greedy = await model.generate(prompt, { maxTokens: 6, temperature: 0 });
    // Aborted after the third token: the core stops, generate rejects with the reason.
    const c = new AbortController();
    const seen: number[] = [];
    const reason = new Error("enough");
    const run = model.generate(prompt, {
      maxTokens: 500,
      temperature: 0,
      signal: c.signal,
      onToken: (t) => {
        seen.push(t);
        if (seen.length === 3) c.abort(reason);
      },
    });
    await expect(run).rejects.toBe(reason);
    expect(seen.slice(0, 3)).toEqual(Array.from(greedy.subarray(0, 3)));
    expect(seen.length).toBeLessThan(500);
    // Without onToken too; and a signal already aborted: nothing generated.
    const later = new AbortController();
    const plain = model.generate(prompt, { maxTokens: 500, temperature: 0, signal: later.signal });
    later.abort();
    await expect(plain).rejects.toMatchObject({ name: "AbortError" });
    await expect(model.generate(prompt, { maxTokens: 3, signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    // A stream's loop throws the reason.
    const s = new AbortController();
    const streamed: number[] = [];
    const loop = (async () => {
      for await (const t of model.stream(prompt, { maxTokens: 500, temperature: 0, signal: s.signal })) {
        streamed.push(t);
        if (streamed.length === 2) s.abort(reason);
      }
    })();
    await expect(loop).rejects.toBe(reason);
    expect(streamed.slice(0, 2)).toEqual(Array.from(greedy.subarray(0, 2)));
    // The model goes on as before; a signal that is not one is refused.
    expect(await model.generate(prompt, { maxTokens: 6, temperature: 0 })).toEqual(greedy);
    await expect(model.generate(prompt, { maxTokens: 1, signal: {} as AbortSignal })).rejects.toThrow(
      /options\.signal must be an AbortSignal, got an Object/,
    );
  });

  it("save then load gives identical outputs, and training continues on exactly the same trajectory", async () => {
    const a = await LanguageModel.create({ ...CONFIG, seed: 31 });
    const batches = Array.from({ length: 6 }, () => sampleBatch(data, BATCH, SEQ, rng(77)));
    for (const b of batches.slice(0, 3)) await a.trainStep(b.inputs, b.targets, { batch: BATCH });
    const bytes = await a.save();
    expect(bytes).toBeInstanceOf(Uint8Array);
    using b = await LanguageModel.load(bytes);
    expect(b.config).toEqual(a.config);
    expect(b.numParameters()).toBe(a.numParameters());
    const probe = batches[5]!;
    expect(await b.predict(probe.inputs, { batch: BATCH })).toEqual(await a.predict(probe.inputs, { batch: BATCH }));
    for (const x of batches.slice(3)) {
      const la = (await a.trainStep(x.inputs, x.targets, { batch: BATCH })).loss;
      const lb = (await b.trainStep(x.inputs, x.targets, { batch: BATCH })).loss;
      expect(lb).toBe(la);
    }
    expect(await b.predict(probe.inputs, { batch: BATCH })).toEqual(await a.predict(probe.inputs, { batch: BATCH }));
    // Without the optimizer state: the same weights in a smaller file.
    const light = await a.save({ optimizer: false });
    expect(light.length).toBeLessThan(bytes.length / 2);
    using c = await LanguageModel.load(light.buffer.slice(light.byteOffset, light.byteOffset + light.byteLength));
    expect(await c.predict(probe.inputs, { batch: BATCH })).toEqual(await a.predict(probe.inputs, { batch: BATCH }));
    // loadWeights: another model of the same config takes the weights.
    using d = await LanguageModel.create({ ...CONFIG, seed: 99 });
    await d.loadWeights(light);
    expect(await d.predict(probe.inputs, { batch: BATCH })).toEqual(await a.predict(probe.inputs, { batch: BATCH }));
    a.dispose();
  });

  it("a truncated, foreign or mistyped checkpoint rejects, naming what is wrong", async () => {
    const bytes = await model.save();
    await expect(LanguageModel.load(bytes.subarray(0, 4))).rejects.toThrow(/the file is 4 bytes, shorter than the 8-byte header/);
    await expect(LanguageModel.load(bytes.subarray(0, bytes.length - 10))).rejects.toThrow(/run past the \d+-byte data buffer \(truncated file\?\)/);
    await expect(LanguageModel.load(new TextEncoder().encode("hello world, not a checkpoint"))).rejects.toThrow(/not a safetensors file/);
    await expect(LanguageModel.load("model.safetensors" as unknown as Uint8Array)).rejects.toThrow(/source must be a Uint8Array, an ArrayBuffer, a Response, a Blob or a ReadableStream.*"model.safetensors"/);
    const other = await LanguageModel.create({ ...CONFIG, layers: 2 });
    await expect(model.loadWeights(await other.save())).rejects.toThrow(/tensor "layers\.1\..*" is not a parameter of this model/);
    other.dispose();
    await stepWorks();
  });
});

describe("bad input rejects with an Error naming the argument, and the model stays usable", () => {
  const good = () => sampleBatch(data, BATCH, SEQ, random);
  const shape = { batch: BATCH, seq: SEQ };

  async function rejects(p: Promise<unknown>, message: RegExp): Promise<void> {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err, `expected a rejection matching ${message}`).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(message);
    await stepWorks();
  }

  it("wrong types", async () => {
    const { inputs, targets } = good();
    await rejects(model.trainStep("abc" as unknown as Int32Array, targets, shape), /inputs must be an Int32Array.*"abc"/);
    await rejects(model.trainStep(inputs, [1, 2, 3] as unknown as Int32Array, shape), /targets must be an Int32Array.*Array/);
    await rejects(model.trainStep(new Float32Array(inputs) as unknown as Int32Array, targets, shape), /inputs must be an Int32Array.*Float32Array/);
    await rejects(model.trainStep(inputs, targets, { batch: "4" as unknown as number, seq: SEQ }), /batch must be a positive integer.*"4"/);
    await rejects(model.generate("ab" as unknown as Int32Array, { maxTokens: 3 }), /prompt must be an Int32Array/);
    await rejects(model.generate(await tok.encode("a"), { maxTokens: 2.5 }), /options.maxTokens must be a positive integer.*2.5/);
    await rejects(model.generate(await tok.encode("a"), { maxTokens: 2, temperature: Number.NaN }), /options.temperature must be a finite number >= 0.*NaN/);
    await rejects(LanguageModel.create({ ...CONFIG, vocabSize: "65" as unknown as number }), /config.vocabSize must be a number, got "65" \(a string\)/);
    await rejects(LanguageModel.create({ ...CONFIG, dModle: 8 } as unknown as typeof CONFIG), /config.dModle is not a LanguageModel option/);
  });

  it("a wrong JS type is a TypeError, a bad value an Error", async () => {
    const { inputs, targets } = good();
    const kind = (p: Promise<unknown>) => p.then(() => "resolved", (e: unknown) => (e as Error).constructor.name);
    expect(await kind(model.trainStep("abc" as unknown as Int32Array, targets, shape))).toBe("TypeError");
    expect(await kind(LanguageModel.create({ ...CONFIG, dModel: "8" as unknown as number }))).toBe("TypeError");
    expect(await kind(model.generate(inputs, { maxTokens: 2, topP: "x" as unknown as number }))).toBe("TypeError");
    expect(await kind(model.trainStep(inputs.map(() => 99), targets, shape))).toBe("Error");
    expect(await kind(model.trainStep(inputs, targets, { batch: 0 }))).toBe("Error");
    expect(await kind(LanguageModel.create({ ...CONFIG, dModel: 30 }))).toBe("Error");
    await stepWorks();
  });

  it("token ids out of range (checked by the core)", async () => {
    const { inputs, targets } = good();
    inputs[3] = 99;
    await rejects(model.trainStep(inputs, targets, shape), /inputs\[3\] = 99 is out of range.*\[0, \d+\)/);
    const t2 = targets.slice();
    t2[5] = -1;
    await rejects(model.trainStep(good().inputs, t2, shape), /targets\[5\] = -1 is out of range/);
    await rejects(model.evaluate(inputs, targets, shape), /inputs\[3\] = 99 is out of range/);
    await rejects(model.generate(Int32Array.of(1, tok.size), { maxTokens: 2 }), /prompt\[1\] = \d+ is out of range/);
  });

  it("zero and mismatched sizes", async () => {
    const { inputs, targets } = good();
    await rejects(model.trainStep(inputs, targets, { batch: 0, seq: SEQ }), /batch must be a positive integer.*0/);
    await rejects(model.trainStep(inputs, targets, { batch: BATCH, seq: 0 }), /seq must be a positive integer.*0/);
    await rejects(model.trainStep(new Int32Array(0), new Int32Array(0)), /inputs must not be empty/);
    await rejects(model.trainStep(inputs, targets.subarray(1), shape), /targets.length must equal inputs.length/);
    await rejects(model.trainStep(inputs, targets, { batch: 3, seq: SEQ }), /inputs.length must be batch \* seq = 3 \* 16 = 48, got 64/);
    // A sequence longer than the context: the core's check.
    const long = sampleBatch(data, 1, 2 * SEQ, random);
    await rejects(model.trainStep(long.inputs, long.targets, { batch: 1, seq: 2 * SEQ }), /seq = 32 is invalid: expected 1 <= seq <= context = 16/);
    // Values are the core's to check: its messages name the C++ field.
    await rejects(LanguageModel.create({ ...CONFIG, dModel: 0 }), /d_model = 0 is invalid/);
    await rejects(LanguageModel.create({ ...CONFIG, layers: -1 }), /layers = -1 is invalid/);
  });

  it("dModel not divisible by heads (checked by the core)", async () => {
    await rejects(LanguageModel.create({ ...CONFIG, dModel: 30, heads: 4 }), /(dModel|d_model).*30.*heads|heads.*(dModel|d_model)/i);
  });

  it("a disposed model", async () => {
    const m = await LanguageModel.create(CONFIG);
    const { inputs, targets } = good();
    await m.trainStep(inputs, targets, shape);
    m.dispose();
    m.dispose(); // twice is harmless
    expect(m.disposed).toBe(true);
    await rejects(m.trainStep(inputs, targets, shape), /LanguageModel.trainStep\(\) was called after dispose\(\)/);
    await rejects(m.generate(await tok.encode("a"), { maxTokens: 1 }), /generate\(\) was called after dispose\(\)/);
    expect(() => m.numParameters()).toThrow(/after dispose/);
  });
});
