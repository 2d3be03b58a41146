// LanguageModel.fromPretrained: a Hugging Face GPT-2 folder written here (a BPE trained on a paragraph and
// exported as tokenizer.json, config.json, model.safetensors in the Hub's layout with fixed-seed weights), read
// from a local HTTP server (127.0.0.1, no network) and from Files and Blobs. The model it builds must be the one
// importPretrained builds from the same bytes (logits bit for bit), generate text as tokenizer + ids do by
// hand, report progress, cancel, and refuse what cannot load with a message that says why.
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BpeTokenizer, init, LanguageModel, memory, type PretrainedProgress } from "../../web/dist/node.js";
import { rng } from "./helpers.js";

const TEXT =
  "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the woods. " +
  "A small model reads the text, then writes the next word, and the next, until the story ends. ";
const PROMPT = "the quick brown fox";
const C = 16;
const P = 32;
const L = 2;

/** A safetensors file of F32 tensors in order: 8-byte little-endian header length, JSON header, raw data. */
function safetensors(tensors: [string, number[], Float32Array][]): Uint8Array {
  const header: Record<string, unknown> = {};
  let at = 0;
  for (const [name, shape, data] of tensors) {
    header[name] = { dtype: "F32", shape, data_offsets: [at, at + data.byteLength] };
    at += data.byteLength;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - ((8 + json.length) % 8)) % 8); // the data 8-byte aligned, as safetensors writes it
  const head = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + head.length + at);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let off = 8 + head.length;
  for (const [, , data] of tensors) {
    out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), off);
    off += data.byteLength;
  }
  return out;
}

/**
 * GPT-2's tensors as GPT2Model names them (Conv1D weights stored [in, out]), fixed-seed uniform values; `edit`
 * may change any before they are written.
 */
function gpt2Weights(V: number, edit: (name: string, values: Float32Array) => void = () => undefined): Uint8Array {
  return safetensors(gpt2Tensors(V, edit));
}

function gpt2Tensors(V: number, edit: (name: string, values: Float32Array) => void = () => undefined): [string, number[], Float32Array][] {
  const random = rng(35);
  const t = (shape: number[], scale: number, center = 0): Float32Array =>
    Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => center + (random() * 2 - 1) * scale);
  const tensors: [string, number[], Float32Array][] = [
    ["wte.weight", [V, C], t([V, C], 0.5)],
    ["wpe.weight", [P, C], t([P, C], 0.2)],
  ];
  for (let l = 0; l < L; l++) {
    const h = `h.${l}.`;
    tensors.push(
      [`${h}ln_1.weight`, [C], t([C], 0.1, 1)],
      [`${h}ln_1.bias`, [C], t([C], 0.1)],
      [`${h}attn.c_attn.weight`, [C, 3 * C], t([C, 3 * C], 0.4)],
      [`${h}attn.c_attn.bias`, [3 * C], t([3 * C], 0.1)],
      [`${h}attn.c_proj.weight`, [C, C], t([C, C], 0.3)],
      [`${h}attn.c_proj.bias`, [C], t([C], 0.1)],
      [`${h}ln_2.weight`, [C], t([C], 0.1, 1)],
      [`${h}ln_2.bias`, [C], t([C], 0.1)],
      [`${h}mlp.c_fc.weight`, [C, 4 * C], t([C, 4 * C], 0.3)],
      [`${h}mlp.c_fc.bias`, [4 * C], t([4 * C], 0.1)],
      [`${h}mlp.c_proj.weight`, [4 * C, C], t([4 * C, C], 0.2)],
      [`${h}mlp.c_proj.bias`, [C], t([C], 0.1)],
    );
  }
  tensors.push(["ln_f.weight", [C], t([C], 0.1, 1)], ["ln_f.bias", [C], t([C], 0.1)]);
  for (const [name, , values] of tensors) edit(name, values);
  return tensors;
}

/**
 * The same tensors as three shards, as the Hub shards a model (model.safetensors.index.json's weight_map naming
 * model-0000N-of-00003.safetensors): the embeddings in the last, layer 0 in the first, the rest in the second.
 */
function shardedWeights(V: number): Record<string, Uint8Array> {
  const parts: [string, number[], Float32Array][][] = [[], [], []];
  const map: Record<string, string> = {};
  const name = (i: number) => `model-0000${i + 1}-of-00003.safetensors`;
  for (const t of gpt2Tensors(V)) {
    const i = t[0].startsWith("wte") || t[0].startsWith("wpe") ? 2 : t[0].startsWith("h.0.") ? 0 : 1;
    parts[i]!.push(t);
    map[t[0]] = name(i);
  }
  const files: Record<string, Uint8Array> = { "model.safetensors.index.json": utf8.encode(JSON.stringify({ metadata: {}, weight_map: map })) };
  parts.forEach((p, i) => (files[name(i)] = safetensors(p)));
  return files;
}

const utf8 = new TextEncoder();

// The folder's files, set in beforeAll.
let tok: BpeTokenizer;
let configText: string;
let tokenizerText: string;
let weights: Uint8Array;

/** URL path -> response: bytes served whole, or a status, or a slow body, or a header promising too much. */
type Route = Uint8Array | number | { slow: Uint8Array } | { claims: number; head?: Uint8Array };
const routes = new Map<string, Route>();
const requested: string[] = [];
let server: http.Server;
let base: string;

function serve(req: http.IncomingMessage, res: http.ServerResponse): void {
  const path = req.url ?? "";
  requested.push(path);
  const r = routes.get(path);
  if (r === undefined && path.startsWith("/spa/")) {
    // A single-page-app host: every unknown path is its index.html, HTTP 200.
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end("<!doctype html><title>app</title>");
    return;
  }
  if (r === undefined || typeof r === "number") {
    res.writeHead(r ?? 404, { "content-type": "text/plain" }).end("no");
    return;
  }
  if (r instanceof Uint8Array) {
    res.writeHead(200, { "content-length": String(r.length) }).end(r);
    return;
  }
  if ("claims" in r) {
    // A Content-Length of gigabytes and a trickle of bytes: the client must refuse from the header alone.
    res.writeHead(200, { "content-length": String(r.claims) });
    res.write(r.head ?? new Uint8Array(1024));
    return;
  }
  // 2 KiB every 5 ms: a download in pieces, that an abort can catch half way.
  const bytes = r.slow;
  res.writeHead(200, { "content-length": String(bytes.length) });
  let at = 0;
  const timer = setInterval(() => {
    if (res.destroyed) return clearInterval(timer);
    res.write(bytes.subarray(at, at + 2048));
    at += 2048;
    if (at >= bytes.length) {
      clearInterval(timer);
      res.end();
    }
  }, 5);
  res.on("close", () => clearInterval(timer));
}

function folder(name: string, files: Record<string, Route>): string {
  for (const [file, r] of Object.entries(files)) routes.set(`/${name}/${file}`, r);
  return `${base}/${name}/`;
}

beforeAll(async () => {
  await init({ threads: 2 });
  tok = await BpeTokenizer.train(TEXT.repeat(4), { vocabSize: 300 });
  tokenizerText = JSON.stringify(tok.toJSON());
  configText = JSON.stringify({
    model_type: "gpt2",
    n_layer: L,
    n_head: 2,
    n_embd: C,
    n_positions: P,
    vocab_size: tok.size,
    activation_function: "gelu_new",
    layer_norm_epsilon: 1e-5,
  });
  weights = gpt2Weights(tok.size);
  server = http.createServer(serve);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** The same model built by hand: importPretrained from the same bytes. */
async function reference(): Promise<LanguageModel> {
  return LanguageModel.importPretrained(configText, weights);
}

async function sameLogits(m: LanguageModel, ref: LanguageModel): Promise<void> {
  const ids = await tok.encode(TEXT.slice(0, 60));
  const a = await m.predict(ids.subarray(0, P));
  const b = await ref.predict(ids.subarray(0, P));
  expect(a.length).toBe(Math.min(ids.length, P) * tok.size);
  expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))).toBe(true);
}

const errorOf = (p: Promise<unknown>): Promise<Error> =>
  p.then(
    () => {
      throw new Error("expected a rejection");
    },
    (e: Error) => e,
  );

describe("LanguageModel.fromPretrained", () => {
  it("loads a Hub-style folder by URL: the model importPretrained builds, its tokenizer, text in and text out", async () => {
    const url = folder("gpt2", {
      "config.json": utf8.encode(configText),
      "tokenizer.json": utf8.encode(tokenizerText),
      "model.safetensors": { slow: weights }, // in 2 KiB pieces: several progress events
    });
    const events: PretrainedProgress[] = [];
    using m = await LanguageModel.fromPretrained(url, { onProgress: (p) => events.push({ ...p }) });
    using ref = await reference();
    await sameLogits(m, ref);

    expect(m.tokenizer).toBeInstanceOf(BpeTokenizer);
    expect(m.tokenizer!.size).toBe(tok.size);
    expect(Array.from(await m.tokenizer!.encode(PROMPT))).toEqual(Array.from(await tok.encode(PROMPT)));

    const options = { maxTokens: 12, temperature: 0 };
    const byHand = await tok.decode(await ref.generate(await tok.encode(PROMPT), options));
    const text = await m.generate(PROMPT, options);
    expect(typeof text).toBe("string");
    expect(text).toBe(byHand);
    expect(text.length).toBeGreaterThan(0);
    // The ids API is unchanged, and a text stream's pieces add up to generate's text.
    expect(Array.from(await m.generate(await tok.encode(PROMPT), options))).toEqual(
      Array.from(await ref.generate(await tok.encode(PROMPT), options)),
    );
    const pieces: string[] = [];
    for await (const piece of m.stream(PROMPT, options)) pieces.push(piece);
    expect(pieces.join("")).toBe(byHand);
    expect(pieces.length).toBeGreaterThan(1);

    // Progress: per file, in order, growing, ending at the file's size.
    expect([...new Set(events.map((e) => e.file))]).toEqual(["config.json", "tokenizer.json", "model.safetensors"]);
    const sizes: Record<string, number> = {
      "config.json": utf8.encode(configText).length,
      "tokenizer.json": utf8.encode(tokenizerText).length,
      "model.safetensors": weights.length,
    };
    for (const [file, size] of Object.entries(sizes)) {
      const mine = events.filter((e) => e.file === file);
      for (let i = 1; i < mine.length; i++) expect(mine[i]!.loaded).toBeGreaterThan(mine[i - 1]!.loaded);
      expect(mine.every((e) => e.total === size)).toBe(true);
      expect(mine.at(-1)!.loaded).toBe(size);
    }
    expect(events.filter((e) => e.file === "model.safetensors").length).toBeGreaterThan(1);
    // A text prompt that is not well-formed Unicode is refused naming the prompt, by generate and by stream.
    const lone = /^prompt has a lone surrogate U\+D800 at index 1: expected well-formed Unicode text/;
    await expect(m.generate("a\uD800b", { maxTokens: 2 })).rejects.toThrow(lone);
    await expect(m.stream("a\uD800b", { maxTokens: 2 }).next()).rejects.toThrow(lone);
  });

  it("a text stream holds back a character cut short until it is whole, or until the end", async () => {
    // A model that always writes the byte token 0xE2 (GPT-2's byte alphabet shows it as "â"), a 3-byte UTF-8 lead:
    // the final LayerNorm's output is its bias (weight 0), the bias is that token's embedding, made the longest.
    const X = tok.toJSON().model.vocab["\u00e2"]!;
    const always = gpt2Weights(tok.size, (name, v) => {
      if (name === "wte.weight") v.fill(3, X * C, (X + 1) * C);
      if (name === "ln_f.weight") v.fill(0);
      if (name === "ln_f.bias") v.fill(3);
    });
    const files = { "config.json": configText, "model.safetensors": always, "tokenizer.json": tokenizerText };
    using m = await LanguageModel.fromPretrained(files);
    const options = { maxTokens: 6, temperature: 0 };
    expect(Array.from(await m.generate(await tok.encode(PROMPT), options))).toEqual(Array(6).fill(X));
    const text = await m.generate(PROMPT, options);
    expect(text).toBe("\uFFFD".repeat(6)); // each lead byte without its continuation: one U+FFFD each
    const pieces: string[] = [];
    for await (const piece of m.stream(PROMPT, options)) pieces.push(piece);
    expect(pieces).toEqual([text]); // every step ended in U+FFFD: nothing shown before the end
  });

  it("a URL without its trailing slash, and GPT-2's older vocab.json + merges.txt", async () => {
    const hf = tok.toJSON();
    const merges = hf.model.merges.map((m) => (typeof m === "string" ? m : m.join(" ")));
    const url = folder("older", {
      "config.json": utf8.encode(configText),
      "vocab.json": utf8.encode(JSON.stringify(hf.model.vocab)),
      "merges.txt": utf8.encode(`#version: 0.2\n${merges.join("\n")}\n`),
      "model.safetensors": weights,
    });
    using m = await LanguageModel.fromPretrained(url.slice(0, -1));
    expect(m.tokenizer).toBeInstanceOf(BpeTokenizer);
    expect(Array.from(await m.tokenizer!.encode(TEXT))).toEqual(Array.from(await tok.encode(TEXT)));
    using ref = await reference();
    await sameLogits(m, ref);
  });

  it("loads from dropped Files and from a record of Blobs, bytes and text", async () => {
    const files = [
      new File([configText], "config.json"),
      new File([weights], "model.safetensors"),
      new File([tokenizerText], "tokenizer.json"),
      new File(["unrelated"], "README.md"),
    ];
    const events: PretrainedProgress[] = [];
    using a = await LanguageModel.fromPretrained(files, { onProgress: (p) => events.push({ ...p }) });
    using b = await LanguageModel.fromPretrained({
      "config.json": configText,
      "model.safetensors": new Blob([weights]),
      "tokenizer.json": utf8.encode(tokenizerText),
    });
    using ref = await reference();
    await sameLogits(a, ref);
    await sameLogits(b, ref);
    const options = { maxTokens: 10, temperature: 0 };
    const byHand = await tok.decode(await ref.generate(await tok.encode(PROMPT), options));
    expect(await a.generate(PROMPT, options)).toBe(byHand);
    expect(await b.generate(PROMPT, options)).toBe(byHand);
    const last = events.filter((e) => e.file === "model.safetensors").at(-1)!;
    expect(last).toEqual({ file: "model.safetensors", loaded: weights.length, total: weights.length });
  });

  it("a picked folder (a FileList's shape): the file nearest its top wins a name two files share", async () => {
    const picked = (contents: BlobPart, relative: string) => {
      const f = new File([contents], relative.split("/").at(-1)!);
      Object.defineProperty(f, "webkitRelativePath", { value: relative });
      return f;
    };
    const list = [
      picked("{ not the config }", "gpt2/onnx/config.json"),
      picked(configText, "gpt2/config.json"),
      picked(weights, "gpt2/model.safetensors"),
      picked(tokenizerText, "gpt2/tokenizer.json"),
    ];
    const fileList: ArrayLike<File> = { length: list.length, ...list }; // what <input webkitdirectory> gives
    using m = await LanguageModel.fromPretrained(fileList);
    using ref = await reference();
    await sameLogits(m, ref);
    expect(m.tokenizer).toBeInstanceOf(BpeTokenizer);
  });

  it("an abort mid-download rejects with the signal's reason and leaves the package usable", async () => {
    const url = folder("slow", {
      "config.json": utf8.encode(configText),
      "tokenizer.json": utf8.encode(tokenizerText),
      "model.safetensors": { slow: weights },
    });
    const before = (await memory()).models.length;
    const controller = new AbortController();
    const reason = new Error("stopped by the test");
    let loadedAtAbort = 0;
    const err = await errorOf(
      LanguageModel.fromPretrained(url, {
        signal: controller.signal,
        onProgress: ({ file, loaded }) => {
          if (file === "model.safetensors" && loaded >= 8192 && !controller.signal.aborted) {
            loadedAtAbort = loaded;
            controller.abort(reason);
          }
        },
      }),
    );
    expect(err).toBe(reason);
    expect(loadedAtAbort).toBeLessThan(weights.length);
    expect((await memory()).models.length).toBe(before);
    // An AbortSignal already aborted (no reason given) rejects with an AbortError before any request.
    const n = requested.length;
    const aborted = new AbortController();
    aborted.abort();
    expect((await errorOf(LanguageModel.fromPretrained(url, { signal: aborted.signal }))).name).toBe("AbortError");
    expect(requested.length).toBe(n);
    // The package goes on: the same folder loads.
    using m = await LanguageModel.fromPretrained(url);
    using ref = await reference();
    await sameLogits(m, ref);
  });

  it("streams sharded weights (model.safetensors.index.json and its shards) by URL and from Files, with progress per file", async () => {
    const shards = shardedWeights(tok.size);
    const names = Object.keys(shards).filter((f) => f !== "model.safetensors.index.json").sort();
    const slow: Record<string, Route> = { "config.json": utf8.encode(configText), "tokenizer.json": utf8.encode(tokenizerText) };
    for (const [f, bytes] of Object.entries(shards)) slow[f] = f.endsWith(".index.json") ? bytes : { slow: bytes };
    const url = folder("shards", slow);
    const events: PretrainedProgress[] = [];
    using m = await LanguageModel.fromPretrained(url, { onProgress: (p) => events.push({ ...p }) });
    using ref = await reference();
    await sameLogits(m, ref);
    const options = { maxTokens: 10, temperature: 0 };
    expect(await m.generate(PROMPT, options)).toBe(await tok.decode(await ref.generate(await tok.encode(PROMPT), options)));
    // Progress: every file in order (the shards one after another, in the index's sorted order), each to its size,
    // so that together they count every byte of the weights.
    expect([...new Set(events.map((e) => e.file))]).toEqual(["config.json", "tokenizer.json", "model.safetensors.index.json", ...names]);
    for (const f of names) {
      const mine = events.filter((e) => e.file === f);
      expect(mine.length).toBeGreaterThan(1);
      for (let i = 1; i < mine.length; i++) expect(mine[i]!.loaded).toBeGreaterThan(mine[i - 1]!.loaded);
      expect(mine.every((e) => e.total === shards[f]!.length)).toBe(true);
      expect(mine.at(-1)!.loaded).toBe(shards[f]!.length);
    }
    // Dropped Files (in any order) and a record of Blobs.
    const dropped = [new File([configText], "config.json"), ...Object.entries(shards).reverse().map(([f, b]) => new File([b], f))];
    using a = await LanguageModel.fromPretrained(dropped);
    await sameLogits(a, ref);
    expect(a.tokenizer).toBeUndefined();
    const record: Record<string, Blob | string> = { "config.json": configText };
    for (const [f, b] of Object.entries(shards)) record[f] = new Blob([b]);
    using b = await LanguageModel.fromPretrained(record);
    await sameLogits(b, ref);
  });

  it("sharded weights: an abort mid-shard, a missing shard, a tensor not where the index says, a shard cut short", async () => {
    const shards = shardedWeights(tok.size);
    const slow: Record<string, Route> = { "config.json": utf8.encode(configText) };
    for (const [f, bytes] of Object.entries(shards)) slow[f] = f.endsWith(".index.json") ? bytes : { slow: bytes };
    const url = folder("shards-abort", slow);
    const before = (await memory()).models.length;
    const controller = new AbortController();
    const reason = new Error("stopped in the second shard");
    const err = await errorOf(
      LanguageModel.fromPretrained(url, {
        signal: controller.signal,
        onProgress: ({ file, loaded }) => {
          if (file === "model-00002-of-00003.safetensors" && loaded >= 4096) controller.abort(reason);
        },
      }),
    );
    expect(err).toBe(reason);
    expect((await memory()).models.length).toBe(before);

    // A shard the index names is not there: named, with the index that names it.
    const { ["model-00003-of-00003.safetensors"]: _, ...lacking } = shards;
    const noShard = folder("shards-missing", { "config.json": utf8.encode(configText), ...lacking });
    expect((await errorOf(LanguageModel.fromPretrained(noShard))).message).toBe(
      `qkv: model-00003-of-00003.safetensors is missing: ${noShard}model-00003-of-00003.safetensors was not found (HTTP 404) ` +
        "(model.safetensors.index.json names it)",
    );
    // The index puts wte.weight in the first shard, which lacks it: the core refuses from the headers.
    const index = JSON.parse(new TextDecoder().decode(shards["model.safetensors.index.json"])) as { weight_map: Record<string, string> };
    index.weight_map["wte.weight"] = "model-00001-of-00003.safetensors";
    const wrong = { ...shards, "config.json": configText, "model.safetensors.index.json": JSON.stringify(index) };
    expect((await errorOf(LanguageModel.fromPretrained(wrong))).message).toContain(
      'model.safetensors.index.json: tensor "wte.weight" is not in model-00001-of-00003.safetensors',
    );
    // The second shard ends 10 bytes early (its size given as what there is): which shard ended where, rather than
    // the third shard's first bytes read as its end; the last shard cut short: the core says so.
    const n = shards["model-00002-of-00003.safetensors"]!.length;
    const cut = { ...shards, "config.json": configText, "model-00002-of-00003.safetensors": shards["model-00002-of-00003.safetensors"]!.subarray(0, -10) };
    expect((await errorOf(LanguageModel.fromPretrained(cut))).message).toMatch(
      new RegExp(`^qkv: model-00002-of-00003\\.safetensors among .* ended after ${n - 10} of the ${n} bytes its safetensors header gives \\(truncated\\?\\)$`),
    );
    const last = shards["model-00003-of-00003.safetensors"]!;
    const cutLast = { ...shards, "config.json": configText, "model-00003-of-00003.safetensors": last.subarray(0, -10) };
    expect((await errorOf(LanguageModel.fromPretrained(cutLast))).message).toContain(
      `ended after ${last.length - 10} of the ${last.length} bytes its safetensors header gives`,
    );
    // A shard whose header is cut short, and one that is not safetensors.
    const short = { ...shards, "config.json": configText, "model-00001-of-00003.safetensors": shards["model-00001-of-00003.safetensors"]!.subarray(0, 20) };
    expect((await errorOf(LanguageModel.fromPretrained(short))).message).toMatch(
      /model-00001-of-00003\.safetensors among .* ended after 20 bytes, before its safetensors header \(\d+ bytes\)/,
    );
    expect((await memory()).models.length).toBe(before);
  });

  it("an HTTP failure names its status and URL", async () => {
    const missing = await errorOf(LanguageModel.fromPretrained(`${base}/nowhere/`));
    expect(missing.message).toContain(`${base}/nowhere/config.json`);
    expect(missing.message).toContain("404");
    expect(missing.message).toContain("config.json is missing");

    const url = folder("broken", { "config.json": utf8.encode(configText), "tokenizer.json": 500, "model.safetensors": weights });
    const broken = await errorOf(LanguageModel.fromPretrained(url));
    expect(broken.message).toContain("HTTP 500");
    expect(broken.message).toContain(`${url}tokenizer.json`);

    const noWeights = folder("noweights", { "config.json": utf8.encode(configText) });
    const e = await errorOf(LanguageModel.fromPretrained(noWeights));
    expect(e.message).toContain(`model.safetensors is missing: ${noWeights}model.safetensors was not found (HTTP 404)`);

    const sharded = folder("badindex", { "config.json": utf8.encode(configText), "model.safetensors.index.json": utf8.encode("{}") });
    expect((await errorOf(LanguageModel.fromPretrained(sharded))).message).toBe(
      `qkv: ${sharded}model.safetensors.index.json: expected an object with a "weight_map" of tensor names to shard files`,
    );

    // A port nobody listens on (a server's, closed): Node's "fetch failed" with its reason.
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const refused = await errorOf(LanguageModel.fromPretrained(`http://127.0.0.1:${port}/gpt2/`));
    expect(refused.message).toMatch(
      new RegExp(`^qkv: cannot fetch http://127\\.0\\.0\\.1:${port}/gpt2/config\\.json: fetch failed \\(.*ECONNREFUSED`),
    );
  });

  it("a host that answers missing files with an HTML page: they count as missing, said so", async () => {
    const url = folder("spa", { "config.json": utf8.encode(configText), "model.safetensors": weights });
    using m = await LanguageModel.fromPretrained(url);
    expect(m.tokenizer).toBeUndefined(); // tokenizer.json, vocab.json: the app's page
    using ref = await reference();
    await sameLogits(m, ref);
    const e = await errorOf(LanguageModel.fromPretrained(`${base}/spa/elsewhere/`));
    expect(e.message).toBe(
      `qkv: config.json is missing: ${base}/spa/elsewhere/config.json answered with an HTML page, not the file (how many ` +
        "static hosts answer a missing file); a model folder as the Hugging Face Hub serves it has config.json and model.safetensors",
    );
  });

  it("a file missing from the files given is named with the files there are", async () => {
    const given = [new File([configText], "config.json"), new File([tokenizerText], "tokenizer.json")];
    const e = await errorOf(LanguageModel.fromPretrained(given));
    expect(e.message).toBe("qkv: model.safetensors is missing: it is not among the files given (config.json, tokenizer.json)");
  });

  it("without tokenizer files: a model without tokenizer, whose text prompts reject saying so", async () => {
    const url = folder("notok", { "config.json": utf8.encode(configText), "model.safetensors": weights });
    using m = await LanguageModel.fromPretrained(url);
    expect(m.tokenizer).toBeUndefined();
    const options = { maxTokens: 4, temperature: 0 };
    const noTokenizer =
      /^prompt must be an Int32Array of token ids, got a string: LanguageModel\.(generate|stream)\(\) takes text only from a model with a tokenizer/;
    await expect(m.generate(PROMPT, options)).rejects.toThrow(noTokenizer);
    await expect(m.generate(PROMPT, options)).rejects.toBeInstanceOf(TypeError);
    await expect(m.stream(PROMPT, options).next()).rejects.toThrow(noTokenizer);
    using ref = await reference();
    const ids = await tok.encode(PROMPT);
    expect(Array.from(await m.generate(ids, options))).toEqual(Array.from(await ref.generate(ids, options)));
    // A tokenizer set by hand makes text work.
    m.tokenizer = tok;
    expect(await m.generate(PROMPT, options)).toBe(await tok.decode(await ref.generate(ids, options)));
  });

  it("stops at the folder's end-of-text by default, as transformers' generate does; stopTokens: [] goes past it", async () => {
    using ref = await reference();
    const ids = await tok.encode(PROMPT);
    const greedy = Array.from(await ref.generate(ids, { maxTokens: 12, temperature: 0 }));
    // The end-of-text: a token greedy decoding makes, the first one new past index 0 (a random model may repeat one).
    const at = Math.max(0, greedy.findIndex((t, i) => i > 0 && greedy.indexOf(t) === i));
    const eos = greedy[at]!;
    const url = folder("eos", {
      "config.json": utf8.encode(JSON.stringify({ ...JSON.parse(configText), eos_token_id: eos })),
      "tokenizer.json": utf8.encode(tokenizerText),
      "model.safetensors": weights,
    });
    using m = await LanguageModel.fromPretrained(url);
    expect(Array.from(m.stopTokens)).toEqual([eos]);
    const options = { maxTokens: 12, temperature: 0 };
    expect(Array.from(await m.generate(ids, options))).toEqual(greedy.slice(0, at + 1));
    expect(await m.generate(PROMPT, options)).toBe(await tok.decode(greedy.slice(0, at + 1)));
    const streamed: number[] = [];
    for await (const t of m.stream(ids, options)) streamed.push(t);
    expect(streamed).toEqual(greedy.slice(0, at + 1));
    expect(Array.from(await m.generate(ids, { ...options, stopTokens: [] }))).toEqual(greedy);
    // Without eos_token_id, the tokenizer's end-of-text; a model not from a folder has none.
    const plainUrl = folder("eos-default", {
      "config.json": utf8.encode(configText),
      "tokenizer.json": utf8.encode(tokenizerText),
      "model.safetensors": weights,
    });
    using plain = await LanguageModel.fromPretrained(plainUrl);
    expect(Array.from(plain.stopTokens)).toEqual([tok.eosId]);
    expect(Array.from(ref.stopTokens)).toEqual([]);
  });

  it("a tokenizer with more tokens than the model's vocabulary is refused, naming both, before the weights are read", async () => {
    const small = JSON.stringify({ ...JSON.parse(configText), vocab_size: tok.size - 1 });
    const url = folder("bigtok", {
      "config.json": utf8.encode(small),
      "tokenizer.json": utf8.encode(tokenizerText),
      "model.safetensors": gpt2Weights(tok.size - 1),
    });
    const e = await errorOf(LanguageModel.fromPretrained(url));
    expect(e.message).toBe(
      `qkv: ${url}config.json: the tokenizer has ${tok.size} tokens, more than the model's vocabulary of ${tok.size - 1} (vocab_size)`,
    );
    expect(requested).not.toContain("/bigtok/model.safetensors");
  });

  it("refuses pytorch_model.bin with the line that converts it, by URL and from Files", async () => {
    const pickle = Uint8Array.of(0x50, 0x4b, 3, 4, 0, 0, 0, 0, 0, 0); // a torch.save zip's first bytes
    const url = folder("pickle", { "config.json": utf8.encode(configText), "pytorch_model.bin": pickle });
    for (const source of [url, [new File([configText], "config.json"), new File([pickle], "pytorch_model.bin")]]) {
      const e = await errorOf(LanguageModel.fromPretrained(source));
      expect(e.message).toContain("pytorch_model.bin but no model.safetensors");
      expect(e.message).toContain("convert it to safetensors");
      expect(e.message).toContain("st.save_file(");
    }
  });

  it("another architecture is refused naming its model_type, before the weights are downloaded", async () => {
    const llama = JSON.stringify({ model_type: "llama", hidden_size: 16 });
    const url = folder("llama", { "config.json": utf8.encode(llama), "model.safetensors": weights });
    const e = await errorOf(LanguageModel.fromPretrained(url));
    expect(e.message).toContain('model_type "llama" is an architecture qkv does not run');
    expect(requested).not.toContain("/llama/model.safetensors");
  });

  it("weights too big for the wasm core are refused from config.json's shapes, before they are read", async () => {
    // gpt2-xl's shape: 1.56e9 parameters, 6.2 GB as float32.
    const xl = JSON.stringify({ model_type: "gpt2", n_layer: 48, n_head: 25, n_embd: 1600, n_positions: 1024, vocab_size: 50257 });
    const url = folder("xl", { "config.json": utf8.encode(xl), "model.safetensors": { claims: 6_230_000_000 } });
    const events: PretrainedProgress[] = [];
    const e = await errorOf(LanguageModel.fromPretrained(url, { onProgress: (p) => events.push(p) }));
    expect(e.message).toContain(`${url}model.safetensors is too big for the wasm core`);
    const params = 1_557_611_200; // gpt2-xl's published parameter count
    expect(e.message).toContain(`${params} parameters`);
    // The file streams in without being held: the float32 weights are what must fit.
    expect(e.message).toContain(`at least ${((4 * params) / 1e9).toFixed(2)} GB of float32 weights`);
    expect(e.message).toContain("4 GiB");
    expect(events.some((p) => p.file === "model.safetensors")).toBe(false);

    // A picked file: refused before it is read (a File that says it holds gpt2-xl's 6.23 GB).
    const big = new File([new Uint8Array(16)], "model.safetensors");
    Object.defineProperty(big, "size", { value: 6_230_000_000 });
    const f = await errorOf(LanguageModel.fromPretrained([new File([xl], "config.json"), big]));
    expect(f.message).toContain("model.safetensors among the files given (config.json, model.safetensors) is too big for the wasm core");
    expect(f.message).toContain(`at least ${((4 * params) / 1e9).toFixed(2)} GB of float32 weights`);
  });

  it("a mistyped n_layer is refused at once, naming the field, whatever its size", async () => {
    const dir = new URL("../fixtures/import/gpt2_tok/", import.meta.url);
    const weights = new Uint8Array(readFileSync(new URL("model.safetensors", dir)));
    const config = JSON.parse(readFileSync(new URL("config.json", dir), "utf8")) as Record<string, unknown>;
    for (const [nLayer, says] of [
      [1e12, '"n_layer" is 1000000000000: expected a positive integer'],
      [2.5, '"n_layer" is 2.5: expected a positive integer'],
      // More layers than the file has: the first 40 problems named, the rest counted.
      [3000, "and 35936 more (35976 in all)"],
    ] as const) {
      const started = performance.now();
      const e = await errorOf(
        LanguageModel.fromPretrained({ "config.json": JSON.stringify({ ...config, n_layer: nLayer }), "model.safetensors": weights }),
      );
      expect(e.message).toContain(says);
      expect(e.message.length).toBeLessThan(5000);
      // 1e12 once sized the weights layer by layer in JavaScript until Node ran out of heap.
      expect(performance.now() - started).toBeLessThan(20_000);
    }
  });

  it("weights too big for the wasm core are counted as they will be held: half-precision matrices kept, from the header", async () => {
    // A GPT-2 of 96 layers 1600 wide: 3.03e9 parameters, 12.1 GB as float32, 6.07 GB with its matrices in F16: too
    // big either way, so nothing is ever allocated. Its model.safetensors is a header that promises the tensors.
    const V = 50257, P = 1024, C = 1600, L = 96, F = 4 * C;
    const big = JSON.stringify({ model_type: "gpt2", n_layer: L, n_head: 25, n_embd: C, n_positions: P, vocab_size: V });
    // name, file shape, packed as quantize packs it (Linear weights, the tied embedding)
    const tensors: [string, number[], boolean][] = [["wte.weight", [V, C], true], ["wpe.weight", [P, C], false]];
    for (let l = 0; l < L; l++) {
      const h = `h.${l}.`;
      tensors.push(
        [`${h}ln_1.weight`, [C], false], [`${h}ln_1.bias`, [C], false],
        [`${h}attn.c_attn.weight`, [C, 3 * C], true], [`${h}attn.c_attn.bias`, [3 * C], false],
        [`${h}attn.c_proj.weight`, [C, C], true], [`${h}attn.c_proj.bias`, [C], false],
        [`${h}ln_2.weight`, [C], false], [`${h}ln_2.bias`, [C], false],
        [`${h}mlp.c_fc.weight`, [C, F], true], [`${h}mlp.c_fc.bias`, [F], false],
        [`${h}mlp.c_proj.weight`, [F, C], true], [`${h}mlp.c_proj.bias`, [C], false],
      );
    }
    tensors.push(["ln_f.weight", [C], false], ["ln_f.bias", [C], false]);
    const header = (dtype: string) => {
      const h: Record<string, unknown> = {};
      let at = 0;
      const width = dtype === "F32" ? 4 : 2;
      for (const [name, shape] of tensors) {
        const n = shape.reduce((a, b) => a * b, 1) * width;
        h[name] = { dtype, shape, data_offsets: [at, at + n] };
        at += n;
      }
      const json = new TextEncoder().encode(JSON.stringify(h));
      const out = new Uint8Array(8 + json.length);
      new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
      out.set(json, 8);
      return { head: out, claims: out.length + at };
    };
    let params = 0;
    let f32 = 0;
    // Parameters::layout: each tensor in 64-byte steps, float32 or (kept) F16 rows of 2 bytes an element (every width
    // here is even: no row padding).
    let kept = 0;
    for (const [, shape, packed] of tensors) {
      const n = shape.reduce((a, b) => a * b, 1);
      params += n;
      f32 += Math.ceil((4 * n) / 64) * 64;
      kept += Math.ceil(((packed ? 2 : 4) * n) / 64) * 64;
    }
    expect(params).toBe(3_033_169_600);
    expect([f32, kept]).toEqual([12_132_678_400, 6_073_616_000]);

    // F16 file, kept: its matrices count 2 bytes an element (the header read for their dtypes), before any allocation.
    const f16 = header("F16");
    const url = folder("big-f16", { "config.json": utf8.encode(big), "model.safetensors": f16 });
    const before = await memory();
    const e = await errorOf(LanguageModel.fromPretrained(url, { weights: "keep" }));
    expect(e.message).toContain(`${url}model.safetensors is too big for the wasm core`);
    expect(e.message).toContain(`needs at least ${(kept / 1e9).toFixed(2)} GB of weights (${4 * L + 1} F16 matrices kept in half precision, the rest float32)`);
    expect(e.message).toContain(`${kept} bytes needed, 4294967296 available`);
    expect(e.message).toContain(`${params} parameters`);
    expect((await memory()).models.length).toBe(before.models.length); // no model was built in the core
    expect((await memory()).heapUsedBytes).toBe(before.heapUsedBytes); // nothing was allocated there
    // The same file as float32 (the default): every tensor counts 4 bytes, the header unread.
    const g = await errorOf(LanguageModel.fromPretrained(url));
    expect(g.message).toContain(`needs at least ${(f32 / 1e9).toFixed(2)} GB of float32 weights`);
    expect(g.message).toContain(`${f32} bytes needed, 4294967296 available`);
    expect(g.message).toContain('weights: "keep" holds F16 / BF16 files in half the size');
    // A float32 file, kept: nothing is half precision, so it counts as float32.
    const f = await errorOf(
      LanguageModel.fromPretrained([new File([big], "config.json"), new File([header("F32").head], "model.safetensors")], {
        weights: "keep",
      }),
    );
    expect(f.message).toContain(`${f32} bytes needed`);
    // Sharded: the shards' headers say it.
    const index = JSON.stringify({ weight_map: Object.fromEntries(tensors.map(([n]) => [n, "model-00001-of-00001.safetensors"])) });
    const s = await errorOf(
      LanguageModel.fromPretrained(
        { "config.json": big, "model.safetensors.index.json": index, "model-00001-of-00001.safetensors": f16.head },
        { weights: "keep" },
      ),
    );
    expect(s.message).toContain(`${kept} bytes needed, 4294967296 available`);
  });

  it("rejects a source of the wrong type and options of the wrong type", async () => {
    await expect(LanguageModel.fromPretrained(42 as never)).rejects.toThrow(TypeError);
    await expect(LanguageModel.fromPretrained([new Blob(["x"])] as never)).rejects.toThrow(/source\[0\] must be a File/);
    await expect(LanguageModel.fromPretrained({ "config.json": 7 } as never)).rejects.toThrow(/source\["config.json"\] must be/);
    await expect(LanguageModel.fromPretrained(`${base}/gpt2/`, { signal: "no" } as never)).rejects.toThrow(/options.signal/);
    await expect(LanguageModel.fromPretrained(`${base}/gpt2/`, { weights: "f16" } as never)).rejects.toThrow(
      /options.weights must be "f32" \(every tensor converted to float32\) or "keep"/,
    );
    await expect(LanguageModel.fromPretrained({ "model.safetensors": weights })).rejects.toThrow(/config.json is missing/);
  });
});

// weights: "keep" on the committed half-precision folders (tests/fixtures/import/gpt2_f16, gpt2_bf16, written by
// make_gpt2_fixtures.py): the model importPretrained + quantize({ weights: "f16" | "bf16" }) builds, bit for bit, at
// its memory, generating PyTorch's greedy tokens.
describe("LanguageModel.fromPretrained with weights: \"keep\"", () => {
  const FIX = new URL("../fixtures/import/", import.meta.url);
  const fix = (name: string) => new Uint8Array(readFileSync(new URL(name, FIX)));
  for (const c of ["f16", "bf16"] as const) {
    it(`${c}: the matrices stay ${c}, the float32 load quantized to ${c} bit for bit, at its memory`, async () => {
      const config = new TextDecoder().decode(fix(`gpt2_${c}/config.json`));
      const weights = fix(`gpt2_${c}/model.safetensors`);
      const url = folder(`keep-${c}`, { "config.json": utf8.encode(config), "model.safetensors": { slow: weights } });
      using kept = await LanguageModel.fromPretrained(url, { weights: "keep" });
      using ref = await LanguageModel.importPretrained(config, weights);
      const f32 = (await ref.memory()).parameters;
      const formats = await ref.quantize({ weights: c });
      expect(Object.keys(formats)).toHaveLength(9); // 4 Linear weights per layer and the tied embedding
      expect((await kept.memory()).parameters).toBe((await ref.memory()).parameters);
      expect((await kept.memory()).parameters).toBeLessThan(f32 * 0.6);
      expect(Buffer.from(await kept.save({ optimizer: false })).equals(Buffer.from(await ref.save({ optimizer: false })))).toBe(true);
      const ids = Int32Array.from({ length: 16 }, (_, i) => (i * 7 + 3) % 61);
      const a = await kept.predict(ids);
      const b = await ref.predict(ids);
      expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))).toBe(true);
      const [prompt, greedy] = new TextDecoder()
        .decode(fix(`gpt2_${c}.greedy.txt`))
        .trim()
        .split("\n")
        .map((line) => Int32Array.from(line.split(" "), Number));
      expect(Array.from(await kept.generate(prompt!, { maxTokens: greedy!.length, temperature: 0 }))).toEqual(Array.from(greedy!));
      // Inference only, as any quantized model.
      await expect(kept.trainStep(ids.subarray(0, 8), ids.subarray(1, 9))).rejects.toThrow(/addLora/);
      // From dropped Files too.
      using dropped = await LanguageModel.fromPretrained([new File([config], "config.json"), new File([weights], "model.safetensors")], {
        weights: "keep",
      });
      expect((await dropped.memory()).parameters).toBe((await ref.memory()).parameters);
    });
  }
});
